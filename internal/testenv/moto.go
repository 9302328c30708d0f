package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// moto (https://github.com/getmoto/moto) is an AWS emulator that speaks the real wire protocols of Amazon EC2
// Auto Scaling, EC2 launch templates and instances, and Amazon ECS container instances — the services kumo
// lacks. Tests use its server mode, moto_server, for contract tests of internal/sim and for end-to-end runs of
// the real binary (docs/testing.md, "AWS operations over the wire").
//
// # One moto per test binary, on a free loopback port
//
// Moto(t) starts moto_server on first use in a test binary (sync.Once) on a port of 127.0.0.1 that was free
// a moment before, and resets its state (POST /moto-api/reset) at the start of every test that calls it, so
// tests that use moto must not run in parallel with each other inside one binary. Main stops it. On Linux the
// server gets SIGKILL when the test binary dies, so a killed `go test` leaves no moto behind.
//
// # Where the binary comes from
//
// $PATCH_AGENT_MOTO, else moto_server on PATH, else the newest ~/.pyenv/versions/*/bin/moto_server (moto
// lives in pyenv's Python on these machines; a shell started without ~/.bashrc has no pyenv shims on PATH).
// When none exists, tests that need moto are skipped, or fail when $CI is set.

const (
	// MotoVersion is the moto release the tests are written against.
	MotoVersion = "5.2.1"
	// motoReadyWithin bounds the wait for a started moto_server to answer.
	motoReadyWithin = 30 * time.Second
	// motoHint says how to get moto_server when it is missing.
	motoHint = "moto_server (moto " + MotoVersion + ") not found: install it with `pip install 'moto[server]==" + MotoVersion +
		"'` into a Python 3 on PATH (or pyenv), or set PATCH_AGENT_MOTO to its path"
)

var (
	motoOnce sync.Once
	motoMu   sync.Mutex
	moto     motoState
)

type motoState struct {
	endpoint string
	bin      string
	missing  string
	err      error
	cmd      *exec.Cmd
	exited   chan struct{}
	log      string
}

// Moto returns the endpoint ("http://127.0.0.1:PORT") of this test binary's moto_server, starting it on first
// use, and resets moto's state so that the test starts from an empty account. It skips the test when
// moto_server is missing (fails when $CI is set) and fails it when moto does not start within 30 s or the
// reset fails. Packages that call it need `func TestMain(m *testing.M) { testenv.Main(m) }`.
func Moto(t testing.TB) (endpoint string) {
	t.Helper()
	st := motoStarted()
	switch {
	case st.err != nil:
		t.Fatalf("moto: %v", st.err)
	case st.missing != "" && inCI():
		t.Fatalf("%s (CI is set, so tests that need moto fail instead of skipping)", st.missing)
	case st.missing != "":
		t.Skip(st.missing)
	}
	if err := ResetMoto(st.endpoint); err != nil {
		t.Fatalf("moto: %v", err)
	}
	return st.endpoint
}

// MotoAvailable reports whether moto_server is found (without starting it), and the path found or the
// message explaining how to get it.
func MotoAvailable() (bool, string) {
	bin, err := MotoBinary()
	if err != nil {
		return false, err.Error()
	}
	return true, bin
}

func motoStarted() motoState {
	motoOnce.Do(func() {
		st := startMoto()
		motoMu.Lock()
		moto = st
		motoMu.Unlock()
	})
	motoMu.Lock()
	defer motoMu.Unlock()
	return moto
}

// ResetMoto empties every service of the moto_server at endpoint (POST /moto-api/reset, about 0.5 s).
func ResetMoto(endpoint string) error {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post(endpoint+"/moto-api/reset", "application/json", nil)
	if err != nil {
		return fmt.Errorf("resetting moto at %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("resetting moto at %s: %s", endpoint, resp.Status)
	}
	return nil
}

// StopMoto stops the moto_server this test binary started (SIGKILL: its state is disposable). Safe to call
// when Moto was never called, and more than once.
func StopMoto() {
	motoMu.Lock()
	defer motoMu.Unlock()
	if moto.cmd == nil {
		return
	}
	_ = moto.cmd.Process.Kill()
	select {
	case <-moto.exited:
	case <-time.After(5 * time.Second):
	}
	moto.cmd = nil
}

// MotoBinary returns the moto_server to use: $PATCH_AGENT_MOTO, else moto_server on PATH, else the
// highest-versioned ~/.pyenv/versions/*/bin/moto_server. The error says where it looked and how to get it.
func MotoBinary() (string, error) {
	if p := os.Getenv("PATCH_AGENT_MOTO"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("PATCH_AGENT_MOTO=%s: %w; %s", p, err, motoHint)
		}
		return p, nil
	}
	if p, err := exec.LookPath("moto_server"); err == nil {
		return p, nil
	}
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	found, _ := filepath.Glob(filepath.Join(root, "versions", "*", "bin", "moto_server"))
	if len(found) > 0 {
		sort.Strings(found)
		return found[len(found)-1], nil
	}
	return "", fmt.Errorf("%s; looked at $PATCH_AGENT_MOTO, PATH and %s", motoHint, filepath.Join(root, "versions", "*", "bin"))
}

// startMoto starts moto_server on a free port of 127.0.0.1 and waits until it answers.
func startMoto() motoState {
	bin, err := MotoBinary()
	if err != nil {
		return motoState{missing: err.Error()}
	}
	port, err := freePort()
	if err != nil {
		return motoState{err: err}
	}
	st := motoState{bin: bin, endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
	logFile, err := os.CreateTemp("", "patch-agent-moto-*.log")
	if err != nil {
		return motoState{err: fmt.Errorf("creating moto log: %w", err)}
	}
	defer logFile.Close() // the child has its own descriptor
	st.log = logFile.Name()
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return motoState{err: fmt.Errorf("starting %s: %w", bin, err)}
	}
	st.cmd, st.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(st.exited) }()
	if err := waitMoto(st.endpoint, st.exited, motoReadyWithin); err != nil {
		_ = cmd.Process.Kill()
		<-st.exited
		return motoState{err: fmt.Errorf("%s on %s: %w: %s", bin, st.endpoint, err, tail(st.log))}
	}
	return st
}

// waitMoto polls moto's dashboard API until it answers.
func waitMoto(endpoint string, exited <-chan struct{}, within time.Duration) error {
	c := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := c.Get(endpoint + "/moto-api/data.json")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before it was ready")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not answer within %s", within)
		}
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free when asked.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// MotoLog returns the path of this binary's moto_server log ("" before it started).
func MotoLog() string {
	motoMu.Lock()
	defer motoMu.Unlock()
	return moto.log
}
