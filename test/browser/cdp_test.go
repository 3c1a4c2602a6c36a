//go:build browser

package browser

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// cdp is a minimal Chrome DevTools Protocol client over
// --remote-debugging-pipe: JSON messages separated by NUL bytes, Chromium
// reading from fd 3 and writing to fd 4.
type cdp struct {
	w       io.WriteCloser
	mu      sync.Mutex
	next    int
	pending map[int]chan cdpMsg
	// Events the test wants to know about (console errors, exceptions).
	problems chan string
}

type cdpMsg struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

type browser struct {
	cmd    *exec.Cmd
	cdp    *cdp
	stderr *lockedBuf
	done   chan struct{}
}

type lockedBuf struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.b) < 1<<20 {
		l.b = append(l.b, p...)
	}
	return len(p), nil
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// chromiumPath finds the browser; $CHROMIUM overrides.
func chromiumPath() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// launch starts headless Chromium with a fresh profile and the flags that
// keep it from talking to anything but the page under test.
func launch(t *testing.T, bin string) *browser {
	t.Helper()
	// Chromium reads commands from fd 3 and writes replies to fd 4.
	toChromeR, toChromeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChromeR, fromChromeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--mute-audio", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "--window-size=1400,900", "about:blank")
	stderr := &lockedBuf{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.ExtraFiles = []*os.File{toChromeR, fromChromeW}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toChromeR.Close()
	fromChromeW.Close()
	b := &browser{cmd: cmd, stderr: stderr, done: make(chan struct{}),
		cdp: &cdp{w: toChromeW, pending: map[int]chan cdpMsg{}, problems: make(chan string, 64)}}
	go func() { _ = cmd.Wait(); close(b.done) }()
	go b.cdp.read(fromChromeR)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.cdp.call(ctx, "", "Browser.close", nil, nil)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill() // the process this test started, by its handle
			<-b.done
		}
		toChromeW.Close()
		fromChromeR.Close()
		if t.Failed() {
			t.Logf("chromium output:\n%s", stderr.String())
		}
	})
	return b
}

func (c *cdp) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			c.mu.Lock()
			for id, ch := range c.pending {
				close(ch)
				delete(c.pending, id)
			}
			c.mu.Unlock()
			return
		}
		var m cdpMsg
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		if m.ID != 0 {
			c.mu.Lock()
			ch := c.pending[m.ID]
			delete(c.pending, m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		c.event(m)
	}
}

// event records what would mean the page is broken: uncaught exceptions
// and console errors.
func (c *cdp) event(m cdpMsg) {
	var p struct {
		Type             string `json:"type"`
		ExceptionDetails struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
		Args []struct {
			Value       any    `json:"value"`
			Description string `json:"description"`
		} `json:"args"`
	}
	_ = json.Unmarshal(m.Params, &p)
	var msg string
	switch {
	case m.Method == "Runtime.exceptionThrown":
		msg = "exception: " + p.ExceptionDetails.Text + " " + p.ExceptionDetails.Exception.Description
	case m.Method == "Runtime.consoleAPICalled" && p.Type == "error":
		msg = fmt.Sprintf("console.error: %v", p.Args)
	default:
		return
	}
	select {
	case c.problems <- msg:
	default:
	}
}

// call sends one command (to a session when session != "") and decodes
// its result into out.
func (c *cdp) call(ctx context.Context, session, method string, params, out any) error {
	c.mu.Lock()
	c.next++
	id := c.next
	ch := make(chan cdpMsg, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	req := map[string]any{"id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	if session != "" {
		req["sessionId"] = session
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	c.mu.Lock()
	_, err = c.w.Write(append(b, 0))
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: browser went away", method)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	}
}

// page is one tab, attached in flat mode.
type page struct {
	c       *cdp
	session string
}

func (b *browser) newPage(ctx context.Context) (*page, error) {
	var tgt struct {
		TargetID string `json:"targetId"`
	}
	if err := b.cdp.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &tgt); err != nil {
		return nil, err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.cdp.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": tgt.TargetID, "flatten": true}, &att); err != nil {
		return nil, err
	}
	p := &page{c: b.cdp, session: att.SessionID}
	for _, m := range []string{"Page.enable", "Runtime.enable"} {
		if err := p.call(ctx, m, nil, nil); err != nil {
			return nil, err
		}
	}
	err := p.call(ctx, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil)
	return p, err
}

func (p *page) call(ctx context.Context, method string, params, out any) error {
	return p.c.call(ctx, p.session, method, params, out)
}

func (p *page) navigate(ctx context.Context, url string) error {
	var res struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.call(ctx, "Page.navigate", map[string]any{"url": url}, &res); err != nil {
		return err
	}
	if res.ErrorText != "" {
		return errors.New("navigate: " + res.ErrorText)
	}
	return nil
}

// eval runs a JavaScript expression in the page and decodes its value.
func (p *page) eval(ctx context.Context, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := p.call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res); err != nil {
		return err
	}
	if res.ExceptionDetails != nil {
		return fmt.Errorf("eval %q: %s", expr, res.ExceptionDetails.Text)
	}
	if out == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

// waitFor polls expr until it yields want (JSON-equal) or ctx ends. Polling
// the DOM is what a person looking at the page does; 25ms is well below
// any transition the test watches.
func (p *page) waitFor(ctx context.Context, expr string, want any) error {
	wantJSON, _ := json.Marshal(want)
	var last json.RawMessage
	for {
		err := p.eval(ctx, expr, &last)
		if err == nil && sameJSON(last, wantJSON) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s == %s: last %s, err %v", expr, wantJSON, last, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// sameJSON compares two JSON texts by value: Chrome escapes non-ASCII
// ("\u00b7") where Go writes the character.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ra, _ := json.Marshal(va)
	rb, _ := json.Marshal(vb)
	return string(ra) == string(rb)
}

func (p *page) screenshot(ctx context.Context) ([]byte, error) {
	var res struct {
		Data []byte `json:"data"` // base64 in JSON, decoded by encoding/json
	}
	err := p.call(ctx, "Page.captureScreenshot", map[string]any{"format": "png"}, &res)
	return res.Data, err
}
