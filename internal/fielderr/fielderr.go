// Package fielderr marks a configuration problem with the Go field it is
// about, so that code which sets that field from a flag or a YAML key can
// name the flag in its message ("-quantile: ...") while the package that
// owns the rule states it once, in its own Validate.
//
// The text of the error is the rule's own; the mark changes nothing a
// caller that ignores it sees.
package fielderr

import (
	"errors"
	"fmt"
)

// Error is a problem with one field of a configuration struct.
type Error struct {
	field string
	err   error
}

// New marks err as a problem with field (a Go field name, e.g. "Window").
func New(field string, err error) error { return &Error{field: field, err: err} }

// Errorf is New(field, fmt.Errorf(format, args...)): %w wraps as usual.
func Errorf(field, format string, args ...any) error {
	return New(field, fmt.Errorf(format, args...))
}

// Error returns the problem's own text.
func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the problem, so errors.Is sees through the mark.
func (e *Error) Unwrap() error { return e.err }

// Field names the field the problem is about.
func (e *Error) Field() string { return e.field }

// Field returns the field err is marked with, or "" when it is not.
func Field(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.field
	}
	return ""
}

// Leaves returns the errors that err joins (errors.Join, at any depth), or
// err itself when it joins none; nil for nil. A marked error is a leaf even
// when its problem joins others.
func Leaves(err error) []error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*Error); ok {
		return []error{err}
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Leaves(e)...)
	}
	return out
}
