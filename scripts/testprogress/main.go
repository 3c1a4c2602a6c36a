// Command testprogress runs go test -json for a long suite (the real-libvirt
// integration tests, the browser test) and prints its progress: a line
// when each top-level test starts and when it ends, with its duration,
// every minute the tests still running and for how long, and a failing
// test's whole output when it fails. Every event is kept, unchanged, in the
// -json file (what make test's closing line counts).
//
//	testprogress -json out/gotest-test-integration.json -- -count=1 -tags integration ./test/integration/...
//
// It exits with go test's exit code.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

func main() {
	jsonPath := flag.String("json", "", "file to keep every go test -json event in (required)")
	goCmd := flag.String("go", "go", "the go command")
	every := flag.Duration("every", time.Minute, "how often to list the tests still running")
	flag.Parse()
	if *jsonPath == "" {
		fmt.Fprintln(os.Stderr, "testprogress: -json is required")
		os.Exit(2)
	}
	os.Exit(run(*goCmd, *jsonPath, *every, flag.Args(), os.Stdout))
}

// run runs go test -json with args, prints progress to w and returns go
// test's exit code.
func run(goCmd, jsonPath string, every time.Duration, args []string, w io.Writer) int {
	keep, err := os.Create(jsonPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		return 2
	}
	defer keep.Close()
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		return 2
	}
	p := newPrinter(w, time.Now())
	follow(io.TeeReader(out, keep), p, every)
	err = cmd.Wait()
	p.done(time.Now())
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		return 2
	}
}

// follow feeds the event stream to p, and every so often the list of the
// tests still running, until the stream ends.
func follow(r io.Reader, p *printer, every time.Duration) {
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return
			}
			var e event
			if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
				fmt.Fprintf(p.w, "%s\n", line) // not an event: show it as it is
				continue
			}
			p.handle(e, time.Now())
		case now := <-tick.C:
			p.heartbeat(now)
		}
	}
}
