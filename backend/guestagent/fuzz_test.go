package guestagent

import (
	"strings"
	"testing"
	"unicode/utf8"
)

var replySeeds = []string{
	`{"return":{}}`,
	`{"return":{"exited":true,"exitcode":0,"out-data":"aGk=","err-data":""}}`,
	`{"return":{"exited":true,"signal":9}}`,
	`{"return":{"exited":false}}`,
	`{"error":{"class":"GenericError","desc":"x"}}`,
	`{"return":null}`,
	`{"return":{"out-data":"!!"}}`,
	`[]`, `null`, ``, `{"return":`,
}

// FuzzDecodeReply: arbitrary bytes never panic, and exactly one of value and
// error comes back.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ret, err := decodeReply(raw)
		if (err == nil) == (ret == nil) {
			t.Fatalf("decodeReply(%q) = %q, %v", raw, ret, err)
		}
	})
}

// FuzzDecodeExecStatus: arbitrary bytes never panic, and a decoded status
// never claims both an exit code and a signal it was not given.
func FuzzDecodeExecStatus(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		st, err := decodeExecStatus(raw)
		if err != nil {
			return
		}
		var res HookResult
		if st.Exited {
			fill(&res, st)
			if n := btoi(res.Exited) + btoi(res.Signaled); n != 1 {
				t.Fatalf("status %+v gave result %+v", st, res)
			}
			_ = res.Err("hook")
		}
	})
}

// FuzzTail: output is valid UTF-8, one line, and bounded.
func FuzzTail(f *testing.F) {
	f.Add([]byte("error: \x1b[31mfailed\n"), 16)
	f.Add([]byte("é日本"), 2)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n > 4096 {
			n = 4096
		}
		got := Tail(b, n)
		limit := n
		if limit <= 0 {
			limit = DefaultTailBytes
		}
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\n\r\x1b\x00") ||
			len(got) > limit+len("…") {
			t.Fatalf("Tail(%q, %d) = %q", b, n, got)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
