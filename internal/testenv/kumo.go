// Package testenv gives tests the AWS emulator kumo (SQS, DynamoDB, EventBridge, SSM, CloudWatch) and the
// client settings to reach it.
//
// # One kumo per machine on 127.0.0.1:4566
//
// EventBridge delivers to SQS only when kumo listens on port 4566 (its queue URLs always name
// localhost:4566), so every test binary shares one kumo on 127.0.0.1:4566 and isolates itself by unique
// resource names (UniqueName). Kumo(t) starts it on first use in a test binary (sync.Once), or reuses the one
// already answering there; a port held by anything that is not kumo fails the test with a clear message.
//
// # Who stops it
//
// `go test ./...` runs several test binaries at once, so the binary that started kumo may finish while
// another still uses it. Every binary that uses kumo holds a shared flock on a users lock file in
// os.TempDir() for its lifetime; StopKumo releases it and, when no other binary holds it, stops the kumo
// that testenv started (its pid is in a pid file beside the lock; a kumo started by hand is never stopped).
// Starting and stopping are serialized by a second lock file, so a binary that arrives while kumo is being
// stopped waits and then starts a new one. A package that calls Kumo must therefore end its tests with
// StopKumo, which is what Main does:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// A binary that dies without StopKumo leaves kumo running with its pid file: the next binary reuses it and
// the last one of that run stops it. kumo's output goes to os.TempDir()/patch-agent-kumo-4566.log.
//
// # Where the binary comes from
//
// $PATCH_AGENT_KUMO, else ${XDG_CACHE_HOME:-$HOME/.cache}/patch-agent/testbin/kumo-v0.33.1/kumo, which
// `make testbin` (scripts/ensure-kumo.sh) builds once per machine. When it is missing and nothing serves the
// port, tests that need kumo are skipped, or fail when $CI is set (CI must never skip them silently).
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

const (
	// KumoVersion is the kumo release the tests are written against.
	KumoVersion = "v0.33.1"
	// KumoAddr is where the shared kumo listens.
	KumoAddr = "127.0.0.1:4566"
	// Region is the region of AWSConfig.
	Region = "us-east-1"

	// kumoReadyWithin bounds the wait for a started kumo to answer /health.
	kumoReadyWithin = 10 * time.Second
	// kumoStopWithin bounds the wait for a stopped kumo to release the port before it is killed.
	kumoStopWithin = 5 * time.Second
	// lockWithin bounds the wait for the start/stop lock held by another test binary.
	lockWithin = 60 * time.Second
	// notBuiltHint is the message of a skipped (or, in CI, failed) test when the binary is missing.
	notBuiltHint = "kumo not built: run make testbin"
)

var (
	kumoOnce sync.Once
	kumoMu   sync.Mutex
	kumo     kumoState
)

// kumoState is what this test binary knows about the shared kumo.
type kumoState struct {
	endpoint string
	missing  string // non-empty: the binary is missing (skip, or fail in CI), with this message
	err      error
	users    *os.File  // shared flock held while this binary uses kumo
	cmd      *exec.Cmd // set when this binary started kumo
	exited   chan struct{}
}

// Kumo returns the endpoint ("http://127.0.0.1:4566") of the shared kumo, starting it if nothing serves
// 127.0.0.1:4566. It skips the test when the kumo binary is missing (fails when $CI is set) and fails it when
// the port is taken by something else or kumo does not become ready within 10 s. Packages that call it need
// `func TestMain(m *testing.M) { testenv.Main(m) }`.
func Kumo(t testing.TB) (endpoint string) {
	t.Helper()
	kumoOnce.Do(func() {
		kumoMu.Lock()
		defer kumoMu.Unlock()
		kumo = setUpKumo()
	})
	kumoMu.Lock()
	st := kumo
	kumoMu.Unlock()
	switch {
	case st.err != nil:
		t.Fatalf("kumo: %v", st.err)
	case st.missing != "" && inCI():
		t.Fatalf("%s (CI is set, so tests that need kumo fail instead of skipping)", st.missing)
	case st.missing != "":
		t.Skip(st.missing)
	}
	return st.endpoint
}

// Main runs the tests of a package that uses Kumo or Moto, then StopKumo and StopMoto, and exits with the
// tests' code.
func Main(m *testing.M) {
	code := m.Run()
	StopKumo()
	StopMoto()
	os.Exit(code)
}

// StopKumo ends this test binary's use of kumo. When no other test binary uses it any more, it stops the
// kumo that testenv started (SIGTERM, SIGKILL 0.1 s after its port closed: its state is disposable) and
// waits until the port is free; a kumo started by hand keeps running.
// Safe to call when Kumo was never called, and more than once.
func StopKumo() {
	kumoMu.Lock()
	defer kumoMu.Unlock()
	if kumo.users == nil {
		return
	}
	users := kumo.users
	kumo.users = nil

	setup, err := lockFile("setup", lockWithin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: not stopping kumo: %v\n", err)
		_ = users.Close()
		return
	}
	defer unlockClose(setup)
	_ = unlock(users)
	last, err := tryLockExclusive(users)
	if err != nil || !last {
		_ = users.Close() // another test binary still uses kumo: the last one stops it
		return
	}
	defer unlockClose(users)
	if err := stopStartedKumo(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping kumo: %v\n", err)
	}
}

// setUpKumo reuses or starts the shared kumo. It holds the setup lock meanwhile, and on success leaves the
// users lock held (shared) in the returned state.
func setUpKumo() kumoState {
	st := kumoState{endpoint: "http://" + KumoAddr}
	setup, err := lockFile("setup", lockWithin)
	if err != nil {
		st.err = err
		return st
	}
	defer unlockClose(setup)

	switch err := probeKumo(); {
	case err == nil:
		// already served: reuse
	case errors.Is(err, errPortFree):
		bin := KumoBinary()
		if _, statErr := os.Stat(bin); statErr != nil {
			st.missing = fmt.Sprintf("%s (or scripts/ensure-kumo.sh, or set PATCH_AGENT_KUMO); no binary at %s", notBuiltHint, bin)
			return st
		}
		if st.cmd, st.exited, err = startKumo(bin); err != nil {
			st.err = err
			return st
		}
	default:
		st.err = err
		return st
	}

	users, err := openLock("users")
	if err == nil {
		err = lockShared(users) // never blocks here: only a holder of the setup lock locks it exclusively
	}
	if err != nil {
		st.err = fmt.Errorf("registering as a kumo user: %w", err)
		return st
	}
	st.users = users
	return st
}

// errPortFree says nothing listens on KumoAddr.
var errPortFree = errors.New("port free")

// probeKumo returns nil when kumo answers on KumoAddr, errPortFree when nothing listens there, and a
// descriptive error when something else holds the port.
func probeKumo() error {
	conn, err := net.DialTimeout("tcp", KumoAddr, 500*time.Millisecond)
	if err != nil {
		return errPortFree
	}
	_ = conn.Close()
	if ok, answer := isKumo(2 * time.Second); !ok {
		return fmt.Errorf("%s is in use by something that is not kumo (GET /health: %s); "+
			"stop it or free the port: tests need kumo there because EventBridge delivers to SQS only on 4566",
			KumoAddr, answer)
	}
	return nil
}

// isKumo reports whether GET /health on KumoAddr gives kumo's answer, and what it got.
func isKumo(timeout time.Duration) (bool, string) {
	c := http.Client{Timeout: timeout}
	resp, err := c.Get("http://" + KumoAddr + "/health")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	body = bytes.TrimSpace(body)
	if len(body) > 80 {
		body = append(body[:80:80], "..."...)
	}
	answer := fmt.Sprintf("%s %q", resp.Status, body)
	compact := strings.ReplaceAll(string(body), " ", "")
	return resp.StatusCode == http.StatusOK && strings.Contains(compact, `"status":"healthy"`), answer
}

// startKumo starts bin on KumoAddr, waits until it answers /health and records its pid.
func startKumo(bin string) (*exec.Cmd, chan struct{}, error) {
	logPath := runtimePath("log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, fmt.Errorf("creating kumo log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	host, port, _ := net.SplitHostPort(KumoAddr)
	cmd := exec.Command(bin, "--host", host, "--port", port)
	cmd.Env = append(os.Environ(), "KUMO_LOG_LEVEL=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile // a file, not a pipe: go test must not wait for kumo's output
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	deadline := time.Now().Add(kumoReadyWithin)
	for {
		if ok, _ := isKumo(time.Second); ok {
			break
		}
		select {
		case <-exited:
			return nil, nil, fmt.Errorf("kumo exited before it was ready (%s): %s", cmd.ProcessState, tail(logPath))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return nil, nil, fmt.Errorf("kumo did not answer /health within %s: %s", kumoReadyWithin, tail(logPath))
		}
	}
	pid := fmt.Sprintf("%d\n%s\n", cmd.Process.Pid, bin)
	if err := os.WriteFile(runtimePath("pid"), []byte(pid), 0o644); err != nil {
		return nil, nil, fmt.Errorf("recording kumo's pid: %w", err)
	}
	return cmd, exited, nil
}

// stopStartedKumo stops the kumo named by the pid file, if testenv started it. The caller holds both locks
// exclusively.
func stopStartedKumo() error {
	pidPath := runtimePath("pid")
	data, err := os.ReadFile(pidPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil // not started by testenv (or already stopped): leave it alone
	}
	if err != nil {
		return err
	}
	defer os.Remove(pidPath)
	lines := strings.SplitN(strings.TrimSpace(string(data)), "\n", 2)
	if len(lines) != 2 {
		return nil
	}
	pid, err := strconv.Atoi(lines[0])
	if err != nil || !looksLikeKumo(pid, lines[1]) {
		return nil // stale pid file: the process is gone, or the pid now belongs to something else
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	// SIGTERM closes the listener at once, but kumo's graceful shutdown then waits up to 5 s for client
	// connections that never sent a request; it holds nothing worth saving, so it gets SIGKILL soon after.
	_ = proc.Signal(syscall.SIGTERM)
	waitPortClosed(kumoStopWithin)
	if !waitGone(pid, lines[1], 100*time.Millisecond) {
		_ = proc.Kill()
		waitGone(pid, lines[1], kumoStopWithin)
	}
	if !waitPortClosed(kumoStopWithin) {
		return fmt.Errorf("kumo (pid %d) still holds %s", pid, KumoAddr)
	}
	waitExited(kumoStopWithin)
	return nil
}

// waitGone waits until pid no longer runs bin (it exited; a zombie counts as gone).
func waitGone(pid int, bin string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for looksLikeKumo(pid, bin) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// looksLikeKumo reports whether pid runs bin on KumoAddr's port (a zombie does not). Without /proc it
// trusts the pid file and only asks whether the process exists.
func looksLikeKumo(pid int, bin string) bool {
	if _, err := os.Stat("/proc/self"); err != nil {
		proc, err := os.FindProcess(pid)
		return err == nil && proc.Signal(syscall.Signal(0)) == nil
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(cmdline) == 0 {
		return false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	_, port, _ := net.SplitHostPort(KumoAddr)
	return args[0] == bin && slices.Contains(args, port)
}

func waitPortClosed(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", KumoAddr, 200*time.Millisecond)
		if err != nil {
			return true
		}
		_ = conn.Close()
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// waitExited reaps kumo when this binary started it.
func waitExited(within time.Duration) {
	if kumo.exited == nil {
		return
	}
	select {
	case <-kumo.exited:
	case <-time.After(within):
	}
}

// KumoBinary returns the path of the kumo binary: $PATCH_AGENT_KUMO, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/patch-agent/testbin/kumo-<KumoVersion>/kumo.
func KumoBinary() string {
	if p := os.Getenv("PATCH_AGENT_KUMO"); p != "" {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "patch-agent", "testbin", "kumo-"+KumoVersion, "kumo")
}

// AWSConfig returns an SDK configuration for kumo at endpoint: static credentials test/test, region
// us-east-1 and BaseEndpoint, which every service client built with NewFromConfig uses.
func AWSConfig(endpoint string) aws.Config {
	return aws.Config{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
	}
}

// Context returns a context for one test's calls to kumo, cancelled at the end of the test or after 60 s.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func inCI() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CI")))
	return v != "" && v != "false" && v != "0"
}

// runtimePath names the shared files of the kumo on KumoAddr: lock files, pid file, log.
func runtimePath(kind string) string {
	_, port, _ := net.SplitHostPort(KumoAddr)
	return filepath.Join(os.TempDir(), "patch-agent-kumo-"+port+"."+kind)
}

func openLock(name string) (*os.File, error) {
	f, err := os.OpenFile(runtimePath(name+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("opening kumo %s lock: %w", name, err)
	}
	return f, nil
}

// lockFile opens the named lock file and locks it exclusively, waiting at most within.
func lockFile(name string, within time.Duration) (*os.File, error) {
	f, err := openLock(name)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(within)
	for {
		ok, err := tryLockExclusive(f)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		if ok {
			return f, nil
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("another test binary held %s for more than %s", f.Name(), within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func unlockClose(f *os.File) {
	_ = unlock(f)
	_ = f.Close()
}

// tail returns the last lines of a log file for error messages.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "no log: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return fmt.Sprintf("log %s:\n%s", path, strings.Join(lines, "\n"))
}
