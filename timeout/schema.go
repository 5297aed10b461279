package timeout

import _ "embed"

//go:embed backoffinterval.schema.json
var backoffIntervalSchema string

// BackoffIntervalJSONSchema returns a JSON Schema (draft 2020-12) for the
// text form of BackoffInterval: a string with a pattern for the grammar,
// a description, examples and the default. The pattern cannot check the
// range rules (min >= 1ms, min <= max), which ParseBackoffInterval does.
func BackoffIntervalJSONSchema() string { return backoffIntervalSchema }
