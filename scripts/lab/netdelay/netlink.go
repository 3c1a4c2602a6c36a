package main

// The nfnetlink_queue wire format, encoded and decoded by hand: no nfqueue
// module can be had here, and the few messages this tool needs are small.
// Numbers are from linux/netlink.h, linux/netfilter/nfnetlink.h,
// linux/netfilter/nfnetlink_queue.h and linux/netfilter.h.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	// Netlink message types and flags (linux/netlink.h).
	nlmsgError    = 0x2
	nlmFRequest   = 0x1
	nlmFAck       = 0x4
	nlMsghdrLen   = 16
	nlAttrHdrLen  = 4
	nfGenMsgLen   = 4
	nfnetlinkV0   = 0
	nlaTypeMask   = ^uint16(1<<15 | 1<<14) // NLA_F_NESTED | NLA_F_NET_BYTEORDER
	nfnlSubsysQ   = 3                      // NFNL_SUBSYS_QUEUE
	nfqnlMsgPkt   = 0                      // NFQNL_MSG_PACKET
	nfqnlMsgVerd  = 1                      // NFQNL_MSG_VERDICT
	nfqnlMsgCfg   = 2                      // NFQNL_MSG_CONFIG
	typePacket    = nfnlSubsysQ<<8 | nfqnlMsgPkt
	typeVerdict   = nfnlSubsysQ<<8 | nfqnlMsgVerd
	typeConfig    = nfnlSubsysQ<<8 | nfqnlMsgCfg
	packetHdrLen  = 7 // struct nfqnl_msg_packet_hdr is packed
	verdictHdrLen = 8
	nfAccept      = 1 // NF_ACCEPT
)

// NFQNL_MSG_CONFIG commands, attributes and values.
const (
	cfgCmdBind     = 1 // NFQNL_CFG_CMD_BIND
	cfgCmdUnbind   = 2 // NFQNL_CFG_CMD_UNBIND
	cfgCmdPFBind   = 3 // NFQNL_CFG_CMD_PF_BIND
	cfgCmdPFUnbind = 4 // NFQNL_CFG_CMD_PF_UNBIND

	attrCfgCmd    = 1 // NFQA_CFG_CMD
	attrCfgParams = 2 // NFQA_CFG_PARAMS
	attrCfgMaxlen = 3 // NFQA_CFG_QUEUE_MAXLEN
	attrCfgMask   = 4 // NFQA_CFG_MASK
	attrCfgFlags  = 5 // NFQA_CFG_FLAGS

	copyMeta = 1 // NFQNL_COPY_META: we never look at the payload

	// NFQA_CFG_F_FAIL_OPEN: when the queue (or our socket) is full the
	// kernel accepts the packet undelayed instead of dropping it.
	cfgFFailOpen = 1 << 0
	// NFQA_CFG_F_GSO: the kernel queues a GSO super-packet whole instead
	// of segmenting it first; we only accept packets, never rewrite them.
	cfgFGSO = 1 << 2
)

// NFQNL_MSG_PACKET and NFQNL_MSG_VERDICT attributes.
const (
	attrPacketHdr  = 1 // NFQA_PACKET_HDR
	attrVerdictHdr = 2 // NFQA_VERDICT_HDR
)

var (
	ne = binary.NativeEndian // netlink headers are in host order
	be = binary.BigEndian    // nfnetlink payloads are in network order
)

// nlMsghdr is struct nlmsghdr.
type nlMsghdr struct {
	Len   uint32
	Type  uint16
	Flags uint16
	Seq   uint32
	Pid   uint32
}

func (h nlMsghdr) put(b []byte) {
	ne.PutUint32(b[0:], h.Len)
	ne.PutUint16(b[4:], h.Type)
	ne.PutUint16(b[6:], h.Flags)
	ne.PutUint32(b[8:], h.Seq)
	ne.PutUint32(b[12:], h.Pid)
}

func getNlMsghdr(b []byte) nlMsghdr {
	return nlMsghdr{
		Len:   ne.Uint32(b[0:]),
		Type:  ne.Uint16(b[4:]),
		Flags: ne.Uint16(b[6:]),
		Seq:   ne.Uint32(b[8:]),
		Pid:   ne.Uint32(b[12:]),
	}
}

// nfGenMsg is struct nfgenmsg, the header of every nfnetlink payload;
// ResID is the queue number (big-endian on the wire).
type nfGenMsg struct {
	Family  uint8
	Version uint8
	ResID   uint16
}

func (g nfGenMsg) put(b []byte) {
	b[0], b[1] = g.Family, g.Version
	be.PutUint16(b[2:], g.ResID)
}

// attr is one netlink attribute, its type without the NLA_F_* flags.
type attr struct {
	Type  uint16
	Value []byte
}

// message is one netlink message: its header and what follows it.
type message struct {
	Header nlMsghdr
	Data   []byte
}

// packet is what we read of a queued packet.
type packet struct {
	Queue      uint16
	ID         uint32
	HWProtocol uint16
	Hook       uint8
}

func align4(n int) int { return (n + 3) &^ 3 }

// encodeAttrs lays attributes out as the kernel wants them: each padded
// to 4 bytes with zeros.
func encodeAttrs(attrs []attr) []byte {
	n := 0
	for _, a := range attrs {
		n += align4(nlAttrHdrLen + len(a.Value))
	}
	b := make([]byte, n)
	off := 0
	for _, a := range attrs {
		ne.PutUint16(b[off:], uint16(nlAttrHdrLen+len(a.Value)))
		ne.PutUint16(b[off+2:], a.Type)
		copy(b[off+nlAttrHdrLen:], a.Value)
		off += align4(nlAttrHdrLen + len(a.Value))
	}
	return b
}

// parseAttrs splits a run of attributes. It refuses a length that points
// outside b and trailing bytes too short for an attribute, since either
// means we misread the message.
func parseAttrs(b []byte) ([]attr, error) {
	var attrs []attr
	for len(b) > 0 {
		if len(b) < nlAttrHdrLen {
			return nil, fmt.Errorf("%d trailing bytes after the attributes", len(b))
		}
		l := int(ne.Uint16(b))
		if l < nlAttrHdrLen || l > len(b) {
			return nil, fmt.Errorf("attribute length %d with %d bytes left", l, len(b))
		}
		attrs = append(attrs, attr{Type: ne.Uint16(b[2:]) & nlaTypeMask, Value: b[nlAttrHdrLen:l:l]})
		b = b[min(align4(l), len(b)):]
	}
	return attrs, nil
}

// encodeMessage builds one nfnetlink message of the queue subsystem.
func encodeMessage(typ, flags uint16, seq uint32, g nfGenMsg, attrs ...attr) []byte {
	body := encodeAttrs(attrs)
	b := make([]byte, nlMsghdrLen+nfGenMsgLen+len(body))
	nlMsghdr{Len: uint32(len(b)), Type: typ, Flags: flags, Seq: seq}.put(b)
	g.put(b[nlMsghdrLen:])
	copy(b[nlMsghdrLen+nfGenMsgLen:], body)
	return b
}

// parseMessages splits one datagram into its netlink messages.
func parseMessages(b []byte) ([]message, error) {
	var msgs []message
	for len(b) > 0 {
		if len(b) < nlMsghdrLen {
			return nil, fmt.Errorf("%d trailing bytes after the messages", len(b))
		}
		h := getNlMsghdr(b)
		if h.Len < nlMsghdrLen || int64(h.Len) > int64(len(b)) {
			return nil, fmt.Errorf("message length %d with %d bytes left", h.Len, len(b))
		}
		msgs = append(msgs, message{Header: h, Data: b[nlMsghdrLen:h.Len:h.Len]})
		b = b[min(align4(int(h.Len)), len(b)):]
	}
	return msgs, nil
}

// decodePacket reads the payload of an NFQNL_MSG_PACKET message. Only the
// packet header matters: its id is what the verdict names.
func decodePacket(data []byte) (packet, error) {
	if len(data) < nfGenMsgLen {
		return packet{}, errors.New("packet message shorter than its nfgenmsg")
	}
	attrs, err := parseAttrs(data[nfGenMsgLen:])
	if err != nil {
		return packet{}, err
	}
	for _, a := range attrs {
		if a.Type != attrPacketHdr {
			continue
		}
		if len(a.Value) < packetHdrLen {
			return packet{}, fmt.Errorf("packet header of %d bytes", len(a.Value))
		}
		return packet{
			Queue:      be.Uint16(data[2:]),
			ID:         be.Uint32(a.Value),
			HWProtocol: be.Uint16(a.Value[4:]),
			Hook:       a.Value[6],
		}, nil
	}
	return packet{}, errors.New("packet message without NFQA_PACKET_HDR")
}

// decodeError reads an NLMSG_ERROR payload: the (negative) errno, zero for
// an acknowledgement, and the header of the request it answers.
func decodeError(data []byte) (errno int32, req nlMsghdr, err error) {
	if len(data) < 4+nlMsghdrLen {
		return 0, nlMsghdr{}, fmt.Errorf("error message of %d bytes", len(data))
	}
	return int32(ne.Uint32(data)), getNlMsghdr(data[4:]), nil
}

// verdictMessage accepts (or otherwise decides) one queued packet.
// No acknowledgement is asked for: one per packet would double the
// traffic, and the kernel reports a failed verdict anyway.
func verdictMessage(queue uint16, id, verdict uint32) []byte {
	v := make([]byte, verdictHdrLen)
	be.PutUint32(v, verdict)
	be.PutUint32(v[4:], id)
	return encodeMessage(typeVerdict, nlmFRequest, 0,
		nfGenMsg{Family: 0, Version: nfnetlinkV0, ResID: queue},
		attr{Type: attrVerdictHdr, Value: v})
}

// cmdMessage is an NFQNL_MSG_CONFIG carrying one NFQA_CFG_CMD.
func cmdMessage(queue uint16, seq uint32, cmd uint8, pf uint16) []byte {
	v := make([]byte, 4) // struct nfqnl_msg_config_cmd: command, pad, pf
	v[0] = cmd
	be.PutUint16(v[2:], pf)
	return encodeMessage(typeConfig, nlmFRequest|nlmFAck, seq,
		nfGenMsg{Family: 0, Version: nfnetlinkV0, ResID: queue},
		attr{Type: attrCfgCmd, Value: v})
}

// paramsMessage sets the copy mode, the queue length and the flags of a
// bound queue in one NFQNL_MSG_CONFIG.
func paramsMessage(queue uint16, seq uint32, copyMode uint8, copyRange, maxlen, flags uint32) []byte {
	params := make([]byte, 5) // struct nfqnl_msg_config_params is packed
	be.PutUint32(params, copyRange)
	params[4] = copyMode
	return encodeMessage(typeConfig, nlmFRequest|nlmFAck, seq,
		nfGenMsg{Family: 0, Version: nfnetlinkV0, ResID: queue},
		attr{Type: attrCfgParams, Value: params},
		attr{Type: attrCfgMaxlen, Value: be32(maxlen)},
		// The kernel changes only the flags that the mask names.
		attr{Type: attrCfgMask, Value: be32(flags)},
		attr{Type: attrCfgFlags, Value: be32(flags)})
}

func be32(v uint32) []byte { return be.AppendUint32(nil, v) }
