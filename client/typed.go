package client

import (
	"context"
	"fmt"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// EnqueueOf enqueues t with payload, encoded by c's codec
// (Config.Codec; JSON unless set), as its Payload: the producer's side
// of worker.Typed, whose handler of the queue decodes it into the same
// type. t.Payload must be empty. A payload the codec cannot encode is
// not sent; its error wraps ErrInvalidArgument. Otherwise it is Enqueue,
// with Enqueue's results and errors.
//
// For a batch of typed payloads, fill each Task.Payload with c.Encode and
// call EnqueueBatch.
func EnqueueOf[T any](ctx context.Context, c *Client, t Task, payload T) (Result, error) {
	if t.Payload != nil {
		err := fmt.Errorf("%w: EnqueueOf's task has a Payload of its own; leave it empty", ErrInvalidArgument)
		return Result{ID: t.ID, Err: err}, err
	}
	p, err := c.Encode(payload)
	if err != nil {
		return Result{ID: t.ID, Err: err}, err
	}
	t.Payload = p
	return c.Enqueue(ctx, t)
}

// Encode returns payload encoded by the client's codec (Config.Codec;
// JSON unless set), for a Task.Payload that a worker.Typed handler
// decodes. An error wraps ErrInvalidArgument.
func (c *Client) Encode(payload any) ([]byte, error) {
	p, err := c.codec.Marshal(payload)
	if err != nil {
		return nil, errtext.Errorf("%w: encode payload %T: %w", ErrInvalidArgument, payload, err)
	}
	return p, nil
}
