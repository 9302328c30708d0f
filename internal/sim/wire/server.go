// Package wire serves a simulated account (internal/sim) on localhost over the AWS wire protocols, so that the
// real `patch-agent run` binary, built from the product's own SDK clients, can run against the simulation:
// Auto Scaling (awsQuery), EC2 (ec2Query), ECS, SSM and EventBridge (awsJson1_1), SQS (awsJson1_0) and EKS
// (restJson1, the read operations of discovery). Point the SDK at it with the per-service endpoint variables
// (Env). Requests are decoded by reflection into the SDK's input types and handed to the simulated account's
// SDK-shaped methods of the same name; answers are encoded from the SDK's output types (the awsJson services
// by the SDK's own serializer, the query protocols by one reflective XML encoder, named as the SDK's
// generated deserializers read them), and errors carry the code and message of the simulated account's
// smithy errors as the service would send them. An operation the simulation does not model is answered with
// an UnknownOperation error and recorded (Unknown), so that a test fails on it.
//
// It is test-world code: the product never imports it.
package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go"

	"github.com/patch-agent/patch-agent/internal/sim"
)

// Protocols of the served services, by SigV4 signing name.
const (
	awsQuery  = "awsQuery"
	ec2Query  = "ec2Query"
	awsJSON   = "awsJson"
	restJSON1 = "restJson1"
)

var protocols = map[string]string{"autoscaling": awsQuery, "ec2": ec2Query, "ecs": awsJSON, "ssm": awsJSON,
	"sqs": awsJSON, "events": awsJSON, "eks": restJSON1}

// EndpointVariables maps the signing names served here to the SDK's per-service endpoint variable
// (aws-sdk-go-v2 config: AWS_ENDPOINT_URL_<SERVICE ID>).
var EndpointVariables = map[string]string{"autoscaling": "AWS_ENDPOINT_URL_AUTO_SCALING", "ec2": "AWS_ENDPOINT_URL_EC2",
	"ecs": "AWS_ENDPOINT_URL_ECS", "ssm": "AWS_ENDPOINT_URL_SSM", "sqs": "AWS_ENDPOINT_URL_SQS",
	"events": "AWS_ENDPOINT_URL_EVENTBRIDGE", "eks": "AWS_ENDPOINT_URL_EKS"}

// Call is one request the server answered, as its log keeps it.
type Call struct {
	Service, Operation string
	// Params is the decoded request: query parameters or JSON members as a tree (lists and maps).
	Params map[string]any
	// Status is the HTTP status answered; Code the error code of an error answer ("" on success).
	Status int
	Code   string
	// Dropped is set when After dropped the answer: the call took effect and its caller never heard.
	Dropped bool
	// Took is the wall time from the request read to the answer decided.
	Took time.Duration
}

// Param returns the parameter at a dotted path of Params ("InstanceId", "LifecycleActionResult"), or "".
func (c Call) Param(path string) string {
	var cur any = c.Params
	for _, s := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[s]
	}
	switch v := cur.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return fmt.Sprint(v)
	}
	return ""
}

// Server serves one simulated account. Create it with Start.
type Server struct {
	URL string

	acct    *sim.Account
	clients map[string]reflect.Value
	ec2     *names
	srv     *http.Server

	mu    sync.Mutex
	log   []Call
	after func(Call) bool
	seq   int
}

// Start serves acct on a free loopback port until ctx ends. The EC2 element names are read from the SDK
// module the calling binary was built with (an error when its generated code cannot be read).
func Start(ctx context.Context, acct *sim.Account) (*Server, error) {
	n, err := ec2SDKNames()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), acct: acct, ec2: n, clients: map[string]reflect.Value{
		"autoscaling": reflect.ValueOf(acct.AutoScaling()), "ec2": reflect.ValueOf(acct.EC2()), "ecs": reflect.ValueOf(acct.ECS()),
		"ssm": reflect.ValueOf(acct.SSM()), "sqs": reflect.ValueOf(acct.SQS()), "events": reflect.ValueOf(acct.EventBridge()),
		"eks": reflect.ValueOf(acct.EKS()),
	}}
	// Keep-alive connections stay open as long as the SDK's idle pool keeps them (90 s): a server closing them
	// first races the client's next request on them.
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	go func() { _ = s.srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = s.srv.Close()
	}()
	return s, nil
}

// Serve answers the calls of service (a SigV4 signing name: "autoscaling", "ec2", "ecs", "ssm", "sqs",
// "events", "eks") with client instead of the account's own: the account's client wrapped by a sim.Faults
// injector, for example, so that throttling and server errors reach the SDK over the wire. client's methods
// take and return the SDK's types, as the awsapi interfaces declare them.
func (s *Server) Serve(service string, client any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[service] = reflect.ValueOf(client)
}

// Env returns the environment variables that send the served services' calls of an SDK client here.
func (s *Server) Env() []string {
	out := make([]string, 0, len(EndpointVariables))
	for _, v := range EndpointVariables {
		out = append(out, v+"="+s.URL)
	}
	return out
}

// AfterApplied sets fn to run after the simulated account applied a call and before its answer is written;
// when fn returns true the answer is dropped (HTTP 502). fn runs for every call, successful or not.
func (s *Server) AfterApplied(fn func(Call) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = fn
}

// Calls returns the log of the calls of operation (every call with "").
func (s *Server) Calls(operation string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.log {
		if operation == "" || c.Operation == operation {
			out = append(out, c)
		}
	}
	return out
}

// Unknown returns the calls the server could not serve: an operation or service the simulation does not
// model, or a request it could not decode.
func (s *Server) Unknown() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.log {
		if c.Code == codeUnknownOperation || c.Code == codeBadRequest {
			out = append(out, c)
		}
	}
	return out
}

const (
	codeUnknownOperation = "UnknownOperation"
	codeBadRequest       = "SerializationException"
)

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	began := time.Now()
	c := Call{Service: signingName(r)}
	proto := protocols[c.Service]
	var params map[string]any
	switch proto {
	case awsQuery, ec2Query:
		form, perr := url.ParseQuery(string(body))
		if perr == nil {
			c.Operation = form.Get("Action")
			params, perr = formTree(form)
		}
		err = perr
	case awsJSON:
		if t := r.Header.Get("X-Amz-Target"); t != "" {
			c.Operation = t[strings.LastIndex(t, ".")+1:]
		}
		params, err = jsonTree(body)
	case restJSON1:
		c.Operation, params, err = restRoute(r)
	default:
		c.Operation = r.Header.Get("X-Amz-Target") + r.URL.Path
		s.answerError(w, r, &c, proto, http.StatusBadRequest, codeUnknownOperation,
			fmt.Sprintf("service %q is not served by the simulated account", c.Service))
		return
	}
	c.Params = params
	if err != nil {
		s.answerError(w, r, &c, proto, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	client := s.clients[c.Service]
	s.mu.Unlock()
	method := client.MethodByName(c.Operation)
	if c.Operation == "" || !method.IsValid() {
		s.answerError(w, r, &c, proto, http.StatusBadRequest, codeUnknownOperation,
			fmt.Sprintf("%s operation %q is not modelled by the simulated account", c.Service, c.Operation))
		return
	}
	in := reflect.New(method.Type().In(1).Elem())
	d := decoder{}
	if proto == ec2Query {
		d.wire = s.ec2.request
	}
	if err := d.assign(in, params, ""); err != nil {
		s.answerError(w, r, &c, proto, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	out, callErr := s.invoke(r.Context(), c.Operation, method, in)
	var apiErr smithy.APIError
	switch {
	case callErr == nil:
		c.Status = http.StatusOK
	case errors.As(callErr, &apiErr):
		c.Status, c.Code = http.StatusBadRequest, apiErr.ErrorCode()
		if apiErr.ErrorFault() == smithy.FaultServer {
			c.Status = http.StatusInternalServerError
		}
	default:
		c.Status, c.Code = http.StatusInternalServerError, "InternalFailure"
	}
	c.Took = time.Since(began)
	s.mu.Lock()
	after := s.after
	s.mu.Unlock()
	if after != nil && after(c) {
		c.Dropped = true
		s.record(c)
		http.Error(w, "answer dropped", http.StatusBadGateway)
		return
	}
	if callErr != nil {
		msg := callErr.Error()
		if apiErr != nil {
			msg = apiErr.ErrorMessage()
		}
		s.answerError(w, r, &c, proto, c.Status, c.Code, msg)
		return
	}
	payload, ctype, err := s.encode(proto, r, c.Operation, out)
	if err != nil {
		s.answerError(w, r, &c, proto, http.StatusInternalServerError, codeBadRequest, err.Error())
		return
	}
	s.record(c)
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("X-Amzn-Requestid", s.requestID())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(payload)
}

// invoke calls the simulated account. A ReceiveMessage that finds nothing waits for a message up to its
// WaitTimeSeconds on the wall clock, as SQS long polling does (the simulated queue never blocks).
func (s *Server) invoke(ctx context.Context, op string, method, in reflect.Value) (any, error) {
	call := func() (any, error) {
		res := method.Call([]reflect.Value{reflect.ValueOf(ctx), in})
		var err error
		if e := res[1].Interface(); e != nil {
			err = e.(error)
		}
		return res[0].Interface(), err
	}
	out, err := call()
	if op != "ReceiveMessage" || err != nil {
		return out, err
	}
	wait := time.Duration(in.Elem().FieldByName("WaitTimeSeconds").Int()) * time.Second
	deadline := time.Now().Add(wait)
	for reflect.ValueOf(out).Elem().FieldByName("Messages").Len() == 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return out, nil
		case <-time.After(100 * time.Millisecond):
		}
		if out, err = call(); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (s *Server) encode(proto string, r *http.Request, op string, out any) ([]byte, string, error) {
	switch proto {
	case awsJSON, restJSON1:
		b, err := jsonBody(op, out)
		ctype := r.Header.Get("Content-Type")
		if proto == restJSON1 || ctype == "" {
			ctype = "application/json"
		}
		return b, ctype, err
	case awsQuery:
		var b strings.Builder
		fmt.Fprintf(&b, `<%sResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><%sResult>`, op, op)
		buf := newBuffer()
		xmlStyle{item: "member"}.xmlMembers(buf, reflect.ValueOf(out))
		b.Write(buf.Bytes())
		fmt.Fprintf(&b, `</%sResult><ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`, op, s.requestID(), op)
		return []byte(b.String()), "text/xml", nil
	case ec2Query:
		var b strings.Builder
		fmt.Fprintf(&b, `<%sResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>%s</requestId>`, op, s.requestID())
		buf := newBuffer()
		xmlStyle{item: "item", names: s.ec2.response}.xmlMembers(buf, reflect.ValueOf(out))
		b.Write(buf.Bytes())
		fmt.Fprintf(&b, `</%sResponse>`, op)
		return []byte(b.String()), "text/xml", nil
	}
	return nil, "", fmt.Errorf("no encoder for protocol %q", proto)
}

// answerError writes an error answer as the service's protocol carries it, and logs the call.
func (s *Server) answerError(w http.ResponseWriter, r *http.Request, c *Call, proto string, status int, code, msg string) {
	c.Status, c.Code = status, code
	s.record(*c)
	id := s.requestID()
	esc := func(v string) string {
		var b strings.Builder
		_ = xmlEscape(&b, v)
		return b.String()
	}
	switch proto {
	case awsQuery:
		kind := "Sender"
		if status >= 500 {
			kind = "Receiver"
		}
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error><Type>%s</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>`,
			kind, esc(code), esc(msg), id)
	case ec2Query:
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>%s</RequestID></Response>`, esc(code), esc(msg), id)
	default:
		ctype := r.Header.Get("Content-Type")
		if ctype == "" || proto == restJSON1 {
			ctype = "application/json"
		}
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("X-Amzn-Errortype", code)
		w.Header().Set("X-Amzn-Requestid", id)
		if c.Service == "sqs" { // awsQueryCompatible: the SDK takes the code from this header
			kind := "Sender"
			if status >= 500 {
				kind = "Receiver"
			}
			w.Header().Set("X-Amzn-Query-Error", code+";"+kind)
		}
		w.WriteHeader(status)
		b, _ := json.Marshal(map[string]string{"__type": code, "message": msg})
		_, _ = w.Write(b)
	}
}

func (s *Server) record(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, c)
}

func (s *Server) requestID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", s.seq)
}

// signingName reads the service from the SigV4 credential scope (".../us-east-1/autoscaling/aws4_request").
func signingName(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	i := strings.Index(auth, "Credential=")
	if i < 0 {
		return ""
	}
	parts := strings.Split(strings.SplitN(auth[i+len("Credential="):], ",", 2)[0], "/")
	if len(parts) < 4 {
		return ""
	}
	return parts[3]
}

// restRoute maps the EKS REST paths of the read operations the agent calls (discovery of managed node groups
// and `auto` AMI sources) to their operation and parameters (Amazon EKS API Reference: ListClusters GET
// /clusters, DescribeCluster GET /clusters/{name}, ListNodegroups GET /clusters/{name}/node-groups,
// DescribeNodegroup GET /clusters/{name}/node-groups/{nodegroupName}).
func restRoute(r *http.Request) (string, map[string]any, error) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	params := map[string]any{}
	for k, v := range r.URL.Query() {
		if k == "include" {
			continue
		}
		params[k] = v[0]
	}
	if r.Method != http.MethodGet || len(parts) == 0 || parts[0] != "clusters" {
		return r.Method + " " + r.URL.Path, params, nil
	}
	for i := range parts {
		p, err := url.PathUnescape(parts[i])
		if err != nil {
			return "", nil, err
		}
		parts[i] = p
	}
	switch {
	case len(parts) == 1:
		return "ListClusters", params, nil
	case len(parts) == 2:
		params["name"] = parts[1]
		return "DescribeCluster", params, nil
	case len(parts) == 3 && parts[2] == "node-groups":
		params["clusterName"] = parts[1]
		return "ListNodegroups", params, nil
	case len(parts) == 4 && parts[2] == "node-groups":
		params["clusterName"], params["nodegroupName"] = parts[1], parts[3]
		return "DescribeNodegroup", params, nil
	}
	return r.Method + " " + r.URL.Path, params, nil
}
