package guestagent

import (
	"bytes"
	"encoding/base64"
)

// minSecretRun is the shortest run of secret bytes that is redacted: long
// enough that ordinary words a hook prints do not match a random blob,
// short enough that no useful piece of a token survives.
const minSecretRun = 16

// redactWindow bounds how much of a hook's output is searched: twice what
// an error can show (Tail keeps DefaultTailBytes), so the search costs the
// same whatever the hook printed.
const redactWindow = 2 * DefaultTailBytes

var blobMark = []byte("[blob]")

// secretForms is a secret as a hook might echo it: the raw bytes and their
// base64 at each of the three alignments (a piece of the base64 text of a
// piece of the blob).
type secretForms [][]byte

func newSecretForms(secret []byte) secretForms {
	if len(secret) < minSecretRun {
		return nil
	}
	forms := secretForms{secret}
	for off := 0; off < 3 && off < len(secret); off++ {
		forms = append(forms, []byte(base64.StdEncoding.EncodeToString(secret[off:])))
	}
	return forms
}

func (f secretForms) contains(window []byte) bool {
	for _, s := range f {
		if bytes.Contains(s, window) {
			return true
		}
	}
	return false
}

// redact returns the end of out (at most redactWindow bytes) with every run
// of minSecretRun or more bytes that also occurs in one of the forms
// replaced by "[blob]". Output that reaches last_error, logs or the admin
// API passes through here first.
func (f secretForms) redact(out []byte) []byte {
	if len(out) > redactWindow {
		out = out[len(out)-redactWindow:]
	}
	if len(f) == 0 || len(out) < minSecretRun {
		return out
	}
	secret := make([]bool, len(out))
	for i := 0; i+minSecretRun <= len(out); i++ {
		if f.contains(out[i : i+minSecretRun]) {
			for j := i; j < i+minSecretRun; j++ {
				secret[j] = true
			}
		}
	}
	var b bytes.Buffer
	for i := 0; i < len(out); i++ {
		if !secret[i] {
			b.WriteByte(out[i])
			continue
		}
		b.Write(blobMark)
		for i+1 < len(out) && secret[i+1] {
			i++
		}
	}
	return b.Bytes()
}

// redactResult applies redact to both outputs of a hook run.
func (f secretForms) redactResult(r HookResult) HookResult {
	r.Stdout, r.Stderr = f.redact(r.Stdout), f.redact(r.Stderr)
	return r
}
