package main

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"testing"
	"time"
)

// recordedPacket is an NFQNL_MSG_PACKET as this kernel (6.18, x86-64) sent
// it for a TCP SYN on lo queued to queue 5 in copy-meta mode with
// NFQA_CFG_F_GSO: NFQA_PACKET_HDR (id 1, ETH_P_IP, hook LOCAL_OUT),
// NFQA_IFINDEX_OUTDEV 1 and NFQA_SKB_INFO. Netlink headers are in host
// order, so it is little-endian only.
const recordedPacket = "30000000000300000000000000000000" + // nlmsghdr
	"02000005" + // nfgenmsg: AF_INET, v0, queue 5
	"0b00010000000001080003" + "00" + // packet header, padded
	"0800060000000001" + // outdev 1
	"08000e0000000001" // skb info

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func littleEndian() bool { return ne.Uint16([]byte{1, 0}) == 1 }

func TestDecodeRecordedPacket(t *testing.T) {
	if !littleEndian() {
		t.Skip("recorded on a little-endian machine")
	}
	msgs, err := parseMessages(unhex(t, recordedPacket))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Header.Type != typePacket || msgs[0].Header.Len != 48 {
		t.Fatalf("messages %+v", msgs)
	}
	p, err := decodePacket(msgs[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if want := (packet{Queue: 5, ID: 1, HWProtocol: 0x0800, Hook: 3}); p != want {
		t.Errorf("packet %+v, want %+v", p, want)
	}
	attrs, err := parseAttrs(msgs[0].Data[nfGenMsgLen:])
	if err != nil {
		t.Fatal(err)
	}
	var types []uint16
	for _, a := range attrs {
		types = append(types, a.Type)
	}
	if !reflect.DeepEqual(types, []uint16{1, 6, 14}) {
		t.Errorf("attribute types %v, want [1 6 14]", types)
	}
}

// TestDecodeTwoMessagesInOneDatagram: the kernel may pack several
// messages in one read; each is found, at its 4-byte aligned offset.
func TestDecodeTwoMessagesInOneDatagram(t *testing.T) {
	one := encodeMessage(typePacket, 0, 0, nfGenMsg{ResID: 7},
		attr{Type: attrPacketHdr, Value: []byte{0, 0, 0, 9, 8, 0, 1}})
	two := encodeMessage(typePacket, 0, 0, nfGenMsg{ResID: 7},
		attr{Type: attrPacketHdr | 1<<14, Value: []byte{0xff, 0, 0, 10, 8, 0, 3}}) // NLA_F_NET_BYTEORDER set
	msgs, err := parseMessages(append(one, two...))
	if err != nil || len(msgs) != 2 {
		t.Fatalf("%d messages, %v", len(msgs), err)
	}
	for i, want := range []packet{{7, 9, 0x0800, 1}, {7, 0xff00000a, 0x0800, 3}} {
		p, err := decodePacket(msgs[i].Data)
		if err != nil || p != want {
			t.Errorf("message %d: %+v, %v; want %+v", i, p, err, want)
		}
	}
}

func TestVerdictEncoding(t *testing.T) {
	got := verdictMessage(5, 0x01020304, nfAccept)
	want := make([]byte, 32)
	nlMsghdr{Len: 32, Type: 0x0301, Flags: nlmFRequest}.put(want)
	copy(want[16:], []byte{0, 0, 0, 5}) // nfgenmsg: AF_UNSPEC, v0, queue 5 big-endian
	ne.PutUint16(want[20:], 12)         // attribute length and type: host order
	ne.PutUint16(want[22:], attrVerdictHdr)
	copy(want[24:], []byte{0, 0, 0, 1, 1, 2, 3, 4}) // NF_ACCEPT, id: big-endian
	if !bytes.Equal(got, want) {
		t.Errorf("verdict\n got %x\nwant %x", got, want)
	}
}

func TestConfigEncoding(t *testing.T) {
	bind := cmdMessage(300, 7, cfgCmdBind, 2)
	h := getNlMsghdr(bind)
	if h.Type != 0x0302 || h.Flags != nlmFRequest|nlmFAck || h.Seq != 7 || int(h.Len) != len(bind) {
		t.Errorf("bind header %+v", h)
	}
	want := []byte{0, 0, 1, 44, 0, 0, 0, 0, cfgCmdBind, 0, 0, 2} // queue 300, AF_INET
	ne.PutUint16(want[4:], 8)
	ne.PutUint16(want[6:], attrCfgCmd)
	if got := bind[16:]; !bytes.Equal(got, want) {
		t.Errorf("bind body\n got %x\nwant %x", got, want)
	}

	params := paramsMessage(300, 8, copyMeta, 0, 4096, cfgFFailOpen)
	attrs, err := parseAttrs(params[16+nfGenMsgLen:])
	if err != nil {
		t.Fatal(err)
	}
	wantAttrs := []attr{
		{attrCfgParams, []byte{0, 0, 0, 0, copyMeta}}, // 9 bytes, padded to 12
		{attrCfgMaxlen, []byte{0, 0, 0x10, 0}},
		{attrCfgMask, []byte{0, 0, 0, 1}},
		{attrCfgFlags, []byte{0, 0, 0, 1}},
	}
	if !reflect.DeepEqual(attrs, wantAttrs) {
		t.Errorf("params attributes %v, want %v", attrs, wantAttrs)
	}
	if len(params) != 16+4+12+8+8+8 {
		t.Errorf("params message of %d bytes", len(params))
	}
}

func TestDecodeError(t *testing.T) {
	req := cmdMessage(1, 42, cfgCmdBind, 2)
	data := ne.AppendUint32(nil, uint32(0xfffffff0)) // -EBUSY
	data = append(data, req[:16]...)
	errno, orig, err := decodeError(data)
	if err != nil || errno != -16 || orig.Seq != 42 || orig.Type != typeConfig {
		t.Errorf("errno %d, request %+v, %v", errno, orig, err)
	}
	if _, _, err := decodeError(data[:19]); err == nil {
		t.Error("a short error message decoded")
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	for name, b := range map[string][]byte{
		"length below header": {3, 0, 1, 0},
		"length past the end": {9, 0, 1, 0, 0, 0, 0, 0},
		"trailing bytes":      {4, 0, 1, 0, 0, 0},
	} {
		if attrs, err := parseAttrs(b); err == nil {
			t.Errorf("%s: parsed as %v", name, attrs)
		}
	}
	if _, err := parseMessages(make([]byte, 15)); err == nil {
		t.Error("a 15-byte datagram parsed")
	}
	if _, err := decodePacket([]byte{2, 0, 0, 5, 8, 0, 6, 0, 0, 0, 0, 1}); err == nil {
		t.Error("a packet without a header decoded")
	}
	if _, err := decodePacket([]byte{2, 0, 0, 5, 8, 0, 1, 0, 0, 0, 0, 1}); err == nil {
		t.Error("a 4-byte packet header decoded")
	}
}

// TestReleaseInOrderWhenDue: every packet is accepted no earlier than its
// due time and in arrival order; after drain, at once.
func TestReleaseInOrderWhenDue(t *testing.T) {
	fifo := make(chan held, 16)
	drain := make(chan struct{})
	type verdict struct {
		id uint32
		at time.Time
	}
	got := make(chan verdict, 16)
	done := make(chan struct{})
	go func() {
		release(func(id uint32) error { got <- verdict{id, time.Now()}; return nil }, fifo, drain)
		close(done)
	}()
	start := time.Now()
	dues := map[uint32]time.Time{}
	for i := range uint32(4) {
		dues[i] = start.Add(time.Duration(i+1) * 20 * time.Millisecond)
		fifo <- held{due: dues[i], id: i}
	}
	for i := range uint32(4) {
		v := <-got
		if v.id != i || v.at.Before(dues[i]) {
			t.Errorf("verdict %d: packet %d at %v, due %v", i, v.id, v.at.Sub(start), dues[i].Sub(start))
		}
	}
	fifo <- held{due: time.Now().Add(time.Hour), id: 99}
	close(drain)
	close(fifo)
	select {
	case v := <-got:
		if v.id != 99 {
			t.Errorf("drained packet %d", v.id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("drain did not release a packet due in an hour")
	}
	<-done
}

// FuzzParseAttrs: the parser never panics, and what it accepts encodes
// back to attributes that parse the same.
func FuzzParseAttrs(f *testing.F) {
	rec, _ := hex.DecodeString(recordedPacket)
	f.Add(rec[16+nfGenMsgLen:])
	f.Add(paramsMessage(1, 1, copyMeta, 0, 4096, cfgFFailOpen|cfgFGSO)[16+nfGenMsgLen:])
	f.Add([]byte{5, 0, 1, 0, 9})
	f.Add([]byte{4, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		attrs, err := parseAttrs(b)
		if err != nil {
			return
		}
		n := 0
		for _, a := range attrs {
			n += nlAttrHdrLen + len(a.Value)
			if a.Type&^nlaTypeMask != 0 {
				t.Fatalf("type %#x keeps its flags", a.Type)
			}
		}
		if n > len(b) {
			t.Fatalf("%d bytes of attributes out of %d", n, len(b))
		}
		again, err := parseAttrs(encodeAttrs(attrs))
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != len(attrs) {
			t.Fatalf("%d attributes, then %d", len(attrs), len(again))
		}
		for i := range attrs {
			if again[i].Type != attrs[i].Type || !bytes.Equal(again[i].Value, attrs[i].Value) {
				t.Fatalf("attribute %d: %v, then %v", i, attrs[i], again[i])
			}
		}
	})
}

// FuzzDecodeMessages: whole datagrams, as read from the socket, never
// make the decoders panic.
func FuzzDecodeMessages(f *testing.F) {
	rec, _ := hex.DecodeString(recordedPacket)
	f.Add(rec)
	f.Add(verdictMessage(3, 4, nfAccept))
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := parseMessages(b)
		if err != nil {
			return
		}
		for _, m := range msgs {
			if int(m.Header.Len) != nlMsghdrLen+len(m.Data) {
				t.Fatalf("header says %d bytes, data has %d", m.Header.Len, len(m.Data))
			}
			_, _ = decodePacket(m.Data)
			_, _, _ = decodeError(m.Data)
		}
	})
}
