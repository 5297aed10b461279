package codec_test

import (
	"errors"
	"fmt"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func Example() {
	layout := tracker.Layout{Lowest: 1, Highest: 60000, SignificantDigits: 2}
	batch := tracker.Batch{
		Key:    tracker.BatchKey{Origin: "node-a", Boot: 42, Epoch: 291234567},
		Layout: layout,
		Dests: []tracker.DestCounts{
			// Of db-1's 5 samples in bucket 4, 2 were attempts that timed out.
			{Dest: "db-1", Total: 7, Buckets: []tracker.Bucket{{Index: 3, Count: 2}, {Index: 4, Count: 5}},
				TimedOut: []tracker.Bucket{{Index: 4, Count: 2}}},
		},
	}

	// Sender: one or more messages of at most 1400 bytes.
	var enc codec.Encoder
	parts, err := enc.BatchParts(batch, 1400)
	if err != nil {
		panic(err)
	}

	// Receiver: one Decoder per goroutine, refusing other layouts.
	dec, err := codec.NewDecoder(layout)
	if err != nil {
		panic(err)
	}
	for _, msg := range parts {
		t, err := dec.Type(msg)
		if err != nil || t != codec.TypeBatch {
			continue // count and drop
		}
		got, err := dec.DecodeBatch(msg)
		if err != nil {
			continue
		}
		fmt.Printf("%d bytes: %s boot %d epoch %d part %d\n", len(msg), got.Key.Origin, got.Key.Boot, got.Key.Epoch, got.Key.Part)
		for _, d := range got.Dests {
			fmt.Println(d.Dest, d.Total, d.Buckets, "timed out:", d.TimedOut)
		}
	}

	// Hostile bytes: an array header declaring 4 G elements.
	_, err = dec.DecodeBatch([]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01})
	fmt.Println(errors.Is(err, codec.ErrMalformed), err)
	// Output:
	// 40 bytes: node-a boot 42 epoch 291234567 part 0
	// db-1 7 [{3 2} {4 5}] timed out: [{4 2}]
	// true codec: malformed message: message: array of 4294967295 elements, only 2 bytes left
}
