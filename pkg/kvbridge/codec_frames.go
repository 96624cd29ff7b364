package kvbridge

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// parseSeq reads a sequence-number frame: exactly 8 bytes, unsigned big-endian
// (wire/vllm-zmq.md §2).
func parseSeq(frame []byte) (uint64, error) {
	if len(frame) != 8 {
		return 0, fmt.Errorf("kvbridge: parse seq: %w: frame has %d bytes, want 8", ErrMalformed, len(frame))
	}
	return binary.BigEndian.Uint64(frame), nil
}

// AppendSeq appends seq as an 8-byte big-endian frame to dst.
func AppendSeq(dst []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, seq)
}

// LiveMessage is a parsed live PUB message. Topic and Payload alias the frames.
type LiveMessage struct {
	Topic   []byte
	Seq     uint64
	Payload []byte
}

// ParseLive checks a live multipart message: exactly three frames [topic, seq, payload]
// (wire/vllm-zmq.md §2), a sequence frame of 8 bytes and a valid UTF-8 topic. The payload is not
// decoded. Errors wrap ErrMalformed.
func ParseLive(frames [][]byte) (LiveMessage, error) {
	if len(frames) != 3 {
		return LiveMessage{}, fmt.Errorf("kvbridge: parse live message: %w: %d frames, want 3", ErrMalformed, len(frames))
	}
	if !utf8.Valid(frames[0]) {
		return LiveMessage{}, fmt.Errorf("kvbridge: parse live message: %w: topic is not UTF-8", ErrMalformed)
	}
	seq, err := parseSeq(frames[1])
	if err != nil {
		return LiveMessage{}, err
	}
	return LiveMessage{Topic: frames[0], Seq: seq, Payload: frames[2]}, nil
}

// ReplayMessage is one parsed replay reply. End is true for the terminator (seq all-ones, empty
// payload), after which no more replies for the request follow. Topic is nil when the
// publisher's layout has no topic frame. Topic and Payload alias the frames.
type ReplayMessage struct {
	Topic   []byte
	Seq     uint64
	Payload []byte
	End     bool
}

// ParseReplayReply parses one replay reply as received by a DEALER (leading empty delimiter) or
// a REQ (no delimiter), in either layout of wire/vllm-zmq.md §8.2: ["", seq, payload] (vLLM
// before PR #45177, SGLang) or ["", topic, seq, payload] (vLLM with PR #45177, llm-d's
// simulator). The last frame is the payload, the one before it the sequence, and a frame before
// that the topic. A sequence of all ones is the terminator. Errors wrap ErrMalformed.
func ParseReplayReply(frames [][]byte) (ReplayMessage, error) {
	f := frames
	if len(f) >= 3 && len(f[0]) == 0 {
		f = f[1:] // the DEALER's empty delimiter
	}
	var m ReplayMessage
	switch len(f) {
	case 2:
	case 3:
		m.Topic = f[0]
		if !utf8.Valid(m.Topic) {
			return ReplayMessage{}, fmt.Errorf("kvbridge: parse replay reply: %w: topic is not UTF-8", ErrMalformed)
		}
	default:
		return ReplayMessage{}, fmt.Errorf("kvbridge: parse replay reply: %w: %d frames, want 3 or 4 (2 or 3 without delimiter)", ErrMalformed, len(frames))
	}
	seq, err := parseSeq(f[len(f)-2])
	if err != nil {
		return ReplayMessage{}, err
	}
	m.Seq, m.Payload = seq, f[len(f)-1]
	m.End = seq == ReplayEndSeq
	return m, nil
}
