package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// call is one AWS call the proxy passed on, as its log keeps it.
type call struct {
	Service, Operation string
	// Form holds the parameters of a query-protocol call (Auto Scaling, EC2); JSON-protocol calls keep none.
	Form url.Values
	// Status is the emulator's HTTP status.
	Status int
	// Killed is set when the agent was killed after the emulator applied the call and before the answer
	// reached it.
	Killed bool
}

// proxy sits between the agent and moto. It logs every call, repairs moto's ECS task answers (numbers where
// the API has strings), and can kill the agent right after the emulator applied a chosen call and before the
// answer is passed back — the few milliseconds between an AWS effect and the agent's durable record of it.
type proxy struct {
	t      *testing.T
	target string // moto's endpoint
	srv    *http.Server
	URL    string
	client *http.Client
	mu     sync.Mutex
	log    []call
	counts map[string]int
	killAt map[string]int // operation -> the occurrence (1-based) after which the agent is killed
	// killIf, when set, kills the agent right after the first applied mutating call it matches (by the call and
	// the request's body); it is cleared then.
	killIf func(c call, body []byte) bool
	kill   func() // kills the agent; set by the supervisor
	// killedPID is the pid of the agent process kill last killed.
	killedPID int
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{t: t, target: target, URL: "http://" + ln.Addr().String(), counts: map[string]int{}, killAt: map[string]int{},
		client: &http.Client{Timeout: 60 * time.Second}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

// mutating are the calls a kill right after may hit: the agent's effects on the account and its record.
var mutating = map[string]bool{
	"CreateLaunchTemplateVersion": true, "UpdateAutoScalingGroup": true, "TerminateInstanceInAutoScalingGroup": true,
	"UpdateContainerInstancesState": true, "CompleteLifecycleAction": true, "StartInstanceRefresh": true, "PutItem": true,
	"TransactWriteItems": true,
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c := call{Service: serviceOf(r)}
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		c.Operation = target[strings.LastIndex(target, ".")+1:]
	} else if i := strings.Index(r.URL.Path, "/operation/"); i >= 0 { // Smithy RPC v2 CBOR (CloudWatch)
		c.Operation = r.URL.Path[i+len("/operation/"):]
	} else if form, err := url.ParseQuery(string(body)); err == nil {
		c.Operation, c.Form = form.Get("Action"), form
	}

	// Not r.Context(): an agent killed (at a random moment) while its call is in flight cancels that context,
	// and moto may still apply the call. The proxy finishes the call and counts it, so the log says what
	// reached the emulator, whoever was alive to hear the answer.
	req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c.Status = resp.StatusCode
	if c.Service == "ecs" && resp.StatusCode == http.StatusOK {
		out = repairTasks(out)
	}

	p.mu.Lock()
	if mutating[c.Operation] {
		p.counts[c.Operation]++
		if n, ok := p.killAt[c.Operation]; ok && n == p.counts[c.Operation] && p.kill != nil {
			c.Killed = true
			delete(p.killAt, c.Operation)
		} else if p.killIf != nil && p.kill != nil && c.Status == http.StatusOK && p.killIf(c, body) {
			c.Killed = true
			p.killIf = nil
		}
	}
	p.log = append(p.log, c)
	kill := p.kill
	p.mu.Unlock()
	if c.Killed {
		kill() // the call is applied in moto; the agent never learns it was
		http.Error(w, "agent killed", http.StatusBadGateway)
		return
	}
	for k, v := range resp.Header {
		if strings.EqualFold(k, "Content-Length") {
			continue
		}
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

// serviceOf reads the signing service from the SigV4 credential scope (".../us-east-1/autoscaling/aws4_request").
func serviceOf(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	i := strings.Index(auth, "Credential=")
	if i < 0 {
		return ""
	}
	scope := strings.SplitN(auth[i+len("Credential="):], ",", 2)[0]
	parts := strings.Split(scope, "/")
	if len(parts) < 4 {
		return ""
	}
	return parts[3]
}

// repairTasks rewrites the cpu and memory of every task (and of its containers) in an ECS answer from the
// numbers moto 5.2.1 sends to the strings of the ECS API (API Reference, Task and Container data types), so
// that aws-sdk-go-v2 can read DescribeTasks, RunTask, StartTask and StopTask answers. Other answers pass as
// they are.
func repairTasks(body []byte) []byte {
	var doc map[string]any
	if json.Unmarshal(body, &doc) != nil {
		return body
	}
	var tasks []any
	if ts, ok := doc["tasks"].([]any); ok {
		tasks = ts
	}
	if t, ok := doc["task"].(map[string]any); ok {
		tasks = append(tasks, t)
	}
	if len(tasks) == 0 {
		return body
	}
	stringify := func(m map[string]any) {
		for _, k := range []string{"cpu", "memory"} {
			if n, ok := m[k].(float64); ok {
				b, _ := json.Marshal(n)
				m[k] = string(b)
			}
		}
	}
	for _, t := range tasks {
		tm, ok := t.(map[string]any)
		if !ok {
			continue
		}
		stringify(tm)
		if cs, ok := tm["containers"].([]any); ok {
			for _, c := range cs {
				if cm, ok := c.(map[string]any); ok {
					stringify(cm)
				}
			}
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return body
	}
	return out
}

// calls returns the log of calls of operation ("": every call).
func (p *proxy) calls(operation string) []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []call
	for _, c := range p.log {
		if operation == "" || c.Operation == operation {
			out = append(out, c)
		}
	}
	return out
}
