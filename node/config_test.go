package node

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigHTTPAndExposure(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		err    string // from Validate, then CheckExposure
	}{
		{name: "defaults"},
		{name: "no HTTP listener", mutate: func(c *Config) { c.HTTP = "" }},
		{name: "bad HTTP", mutate: func(c *Config) { c.HTTP = "nope" }, err: "-http: want host:port"},
		{name: "exposed HTTP without token", mutate: func(c *Config) { c.HTTP = "0.0.0.0:8080" }, err: "add -http-token-file"},
		{name: "exposed HTTP with token", mutate: func(c *Config) { c.HTTP = "0.0.0.0:8080"; c.HTTPTokenFile = "t" }},
		{name: "exposed gossip without key", mutate: func(c *Config) { c.Bind = "0.0.0.0:7946" }, err: "add -secret-key-file"},
		{name: "exposed gossip, gossip disabled", mutate: func(c *Config) { c.Bind = "0.0.0.0:7946"; c.DisableGossip = true }},
		{name: "insecure", mutate: func(c *Config) { c.Bind, c.HTTP, c.Insecure = "0.0.0.0:7946", "0.0.0.0:1", true }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			err := c.Validate()
			if err == nil {
				err = c.CheckExposure()
			}
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
			}
		})
	}
}
