package server

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Encode once, serve many: Get and List answer with each machine's binary
// protobuf encoding, made once per published record (lazily, on its first
// read) and cached with it (record.Machine.Encoded). The cached bytes
// reach the wire as the unknown fields of an otherwise empty message, a
// "carrier": the protobuf codec (gRPC, gRPC-Web, Connect with
// application/proto) writes unknown fields verbatim, so a List of N
// machines is one buffer assembled from N cached encodings and copied,
// not N messages built and marshalled. The JSON codecs parse a carrier
// back into a real message first (codec.go), so JSON stays correct.
//
// The bytes equal proto.MarshalOptions{Deterministic: true}.Marshal of the
// message MachineToProto builds (encodecache_test.go checks it for every
// state and field).

// deterministic sorts map entries, so a record always encodes the same.
var deterministic = proto.MarshalOptions{Deterministic: true}

// Field numbers of MachineList (CONTRACT.md).
const (
	listMachinesField protowire.Number = 1
	listRevisionField protowire.Number = 2
)

// encodeMachine is the one encoder handed to Machine.Encoded. It returns
// nil when the record cannot be encoded (a string that is not UTF-8): the
// carrier is then not used and the ordinary marshal reports the error.
func encodeMachine(m *record.Machine) []byte {
	b, err := deterministic.Marshal(convert.MachineToProto(*m))
	if err != nil {
		return nil
	}
	if b == nil {
		b = []byte{} // an all-default record encodes to nothing; still a success
	}
	return b
}

// machineBytes is m's cached encoding (nil: cannot be encoded). The bytes
// are shared: capped so an append can never write into the cache.
func machineBytes(m *record.Machine) []byte {
	b := m.Encoded(encodeMachine)
	return b[:len(b):len(b)]
}

// carry makes msg a carrier of raw, already-encoded fields.
func carry[M proto.Message](msg M, raw []byte) M {
	msg.ProtoReflect().SetUnknown(raw)
	return msg
}

// machineMessage is Get's answer for a published record.
func machineMessage(m *record.Machine) *pb.Machine {
	b := machineBytes(m)
	if b == nil {
		return convert.MachineToProto(*m)
	}
	return carry(new(pb.Machine), b)
}

// listMessage is List's answer: field 1 (machines) once per record from
// its cached bytes, then field 2 (revision), exactly as a deterministic
// marshal of the whole message would lay them out.
func listMessage(res lifecycle.SharedList) *pb.MachineList {
	size := 0
	for _, m := range res.Machines {
		b := machineBytes(m)
		if b == nil {
			return sharedListToProto(res)
		}
		size += protowire.SizeTag(listMachinesField) + protowire.SizeBytes(len(b))
	}
	if len(res.Revision) > 0 {
		size += protowire.SizeTag(listRevisionField) + protowire.SizeBytes(len(res.Revision))
	}
	buf := make([]byte, 0, size)
	for _, m := range res.Machines {
		buf = protowire.AppendTag(buf, listMachinesField, protowire.BytesType)
		buf = protowire.AppendBytes(buf, machineBytes(m))
	}
	if len(res.Revision) > 0 {
		buf = protowire.AppendTag(buf, listRevisionField, protowire.BytesType)
		buf = protowire.AppendBytes(buf, res.Revision)
	}
	return carry(new(pb.MachineList), buf)
}

// sharedListToProto is the ordinary path, for a page holding a record
// that cannot be encoded.
func sharedListToProto(res lifecycle.SharedList) *pb.MachineList {
	out := &pb.MachineList{Machines: make([]*pb.Machine, len(res.Machines)), Revision: res.Revision}
	for i, m := range res.Machines {
		out.Machines[i] = convert.MachineToProto(*m)
	}
	return out
}
