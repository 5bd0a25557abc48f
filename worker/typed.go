package worker

import (
	"context"
	"errors"
	"reflect"

	"github.com/hourglass-sched/hourglass/codec"
	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// ErrPayloadDecode is wrapped by the error of a Typed handler whose
// task's payload does not decode: the error the task is dead-lettered
// with, which a middleware around the Handler can test with errors.Is.
var ErrPayloadDecode = errors.New("hourglass: payload does not decode")

// HandlerOf runs one task whose payload was decoded into a T. Task.Payload
// still holds the bytes it was decoded from. Its result is used as a
// Handler's (see the package documentation).
type HandlerOf[T any] func(ctx context.Context, t *Task, payload T) error

// Typed returns a Handler that decodes each task's payload into a T with
// JSON (codec.JSON) and calls h with it: TypedWith(codec.JSON{}, h).
//
// A payload that does not decode into a T is a permanent failure: h is
// not called and the task goes to the dead-letter queue at once, as with
// NoRetry, with an error wrapping ErrPayloadDecode that names the type
// and the codec's error, kept as its dead letter's error (reason "not
// retryable", error "hourglass: payload does not decode as main.Order:
// invalid character ..."):
// retrying cannot fix the bytes; fix the producer, then replay the dead
// letters.
func Typed[T any](h HandlerOf[T]) Handler { return TypedWith(codec.JSON{}, h) }

// TypedWith is Typed with the codec c instead of JSON. The queue's
// producers must encode its payloads with the same codec
// (client.Config.Codec). A nil c or h gives a nil Handler, which Handle
// refuses.
func TypedWith[T any](c codec.Codec, h HandlerOf[T]) Handler {
	if c == nil || h == nil {
		// Handle reports a nil Handler as invalid: keep the mistake
		// visible there instead of panicking on the first task.
		return nil
	}
	typ := reflect.TypeFor[T]().String()
	return func(ctx context.Context, t *Task) error {
		var v T
		if err := c.Unmarshal(t.Payload, &v); err != nil {
			return NoRetry(errtext.Errorf("%w as %s: %w", ErrPayloadDecode, typ, err))
		}
		return h(ctx, t, v)
	}
}
