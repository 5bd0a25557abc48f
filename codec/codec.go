// Package codec turns typed task payloads into bytes and back: a task's
// payload is bytes in Redis and on the wire, and a Codec is what
// client.EnqueueOf and worker.Typed use to carry a Go value in it.
//
// JSON is the default on both sides. Another encoding (protobuf,
// msgpack, a versioned envelope) is a type with the two methods below;
// producers and workers of a queue must use the same one.
package codec

import (
	"encoding/json"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// Codec encodes a payload value into bytes and decodes it back.
// Implementations must be safe for concurrent use: a worker decodes the
// payloads of many handlers at once.
type Codec interface {
	// Marshal returns the encoding of v.
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes data into the value v points to.
	Unmarshal(data []byte, v any) error
}

// JSON is the default Codec: encoding/json's Marshal and Unmarshal.
// Decoding ignores fields the type does not have, so a producer may add
// fields before its workers know them; an empty payload does not decode
// (it is not JSON). Its errors wrap encoding/json's ("hourglass: json:
// ...").
type JSON struct{}

// Marshal returns the JSON encoding of v.
func (JSON) Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, errtext.Errorf("%w", err)
	}
	return b, nil
}

// Unmarshal decodes the JSON data into the value v points to.
func (JSON) Unmarshal(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return errtext.Errorf("%w", err)
	}
	return nil
}

var _ Codec = JSON{}
