package server

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodec replaces connect-go's JSON codecs ("json" and
// "json; charset=utf-8", both registered) with the same protojson mapping
// plus one step: a carrier (encodecache.go) is parsed back into a real
// message before it is written, because protojson skips unknown fields.
// Messages without unknown fields, everything but Get and List answers,
// go through untouched. JSON users (curl, browsers' Connect-JSON) pay a
// parse; the binary protocols never do.
type jsonCodec struct{ name string }

var _ connect.Codec = jsonCodec{}

func jsonCodecs() connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithCodec(jsonCodec{"json"}),
		connect.WithCodec(jsonCodec{"json; charset=utf-8"}),
	)
}

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) Marshal(msg any) ([]byte, error) {
	return c.MarshalAppend(nil, msg)
}

func (c jsonCodec) MarshalAppend(dst []byte, msg any) ([]byte, error) {
	pm, err := materialize(msg)
	if err != nil {
		return nil, err
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, pm)
}

// Unmarshal matches connect-go's: unknown JSON fields are dropped, so
// clients on a newer schema still work; an empty body is not an object.
func (c jsonCodec) Unmarshal(data []byte, msg any) error {
	pm, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("json codec: %T is not a protobuf message", msg)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", msg, err)
	}
	return nil
}

// materialize returns msg with its unknown fields parsed into the fields
// they encode (a copy; the carrier and its shared bytes are not touched).
func materialize(msg any) (proto.Message, error) {
	pm, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("json codec: %T is not a protobuf message", msg)
	}
	raw := pm.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return pm, nil
	}
	out := proto.Clone(pm)
	out.ProtoReflect().SetUnknown(nil)
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("json codec: decode cached %T: %w", msg, err)
	}
	return out, nil
}
