package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// env is what every case gets: where the server is and how to reach it.
type env struct {
	target string
	tls    *tls.Config
	// Case parameters (flags of run).
	streams, connections, calls int
	streamBytes                 int
	streamDeadline              time.Duration
	wait                        time.Duration
}

// result is a case's output: answer is compared between the servers, figures only recorded.
type result struct {
	Case    string         `json:"case"`
	Answer  map[string]any `json:"answer"`
	Figures map[string]any `json:"figures"`
}

var cases = map[string]func(e *env) (map[string]any, map[string]any, error){
	"load-one-connection":           loadOneConnection,
	"load-many-connections":         loadManyConnections,
	"gzip-request":                  gzipRequest,
	"request-over-4mib":             requestOver4MiB,
	"tiny-deadlines":                tinyDeadlines,
	"cancellation-storm":            cancellationStorm,
	"unknown-method":                unknownMethod,
	"not-grpc":                      notGRPC,
	"stalled-body-with-deadline":    func(e *env) (map[string]any, map[string]any, error) { return stalledBody(e, true) },
	"stalled-body-without-deadline": func(e *env) (map[string]any, map[string]any, error) { return stalledBody(e, false) },
	"many-streams-one-connection":   manyStreamsOneConnection,
	"streams-past-the-limit":        streamsPastTheLimit,
	"ping-flood":                    pingFlood,
	"connection-churn":              connectionChurn,
	"client-not-allowed":            clientNotAllowed,
	"flood":                         flood,
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	name := fs.String("case", "", "the case to play")
	target := fs.String("target", "", "HOST:PORT of the server")
	serverName := fs.String("server-name", "localhost", "the name the server certificate must carry")
	certFile := fs.String("cert", "", "PEM client certificate")
	keyFile := fs.String("key", "", "PEM client key")
	caFile := fs.String("ca", "", "PEM CA of the server certificate")
	e := &env{}
	fs.IntVar(&e.streams, "streams", 10000, "flood: streams")
	fs.IntVar(&e.connections, "connections", 100, "flood: connections; connection-churn: connections")
	fs.IntVar(&e.calls, "calls", 5000, "load, storm and many-streams cases: calls")
	fs.IntVar(&e.streamBytes, "stream-bytes", 4<<20-1024, "flood: the message each stream sends and never ends")
	fs.DurationVar(&e.streamDeadline, "stream-deadline", 20*time.Second, "flood: each stream's deadline")
	fs.DurationVar(&e.wait, "wait", 4*time.Second, "stalled bodies: how long to wait for an answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	play, ok := cases[*name]
	if !ok {
		return fmt.Errorf("unknown case %q", *name)
	}
	cert, pool, err := loadTLS(*certFile, *keyFile, *caFile)
	if err != nil {
		return err
	}
	e.target = *target
	e.tls = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: *serverName, MinVersion: tls.VersionTLS12}
	answer, figures, err := play(e)
	if err != nil {
		return fmt.Errorf("%s: %w", *name, err)
	}
	out, err := json.Marshal(result{Case: *name, Answer: answer, Figures: figures})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// --- grpc-go client helpers ------------------------------------------------------------------------

func dial(e *env) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+e.target,
		grpc.WithTransportCredentials(credentials.NewTLS(e.tls.Clone())),
		//nolint:staticcheck // the pass-through codec needs the v1 codec interface
		grpc.WithDefaultCallOptions(grpc.ForceCodec(passThrough{})))
}

func invoke(ctx context.Context, conn *grpc.ClientConn, method string, req frame, opts ...grpc.CallOption) codes.Code {
	var reply frame
	err := conn.Invoke(ctx, "/"+service+"/"+method, &req, &reply, opts...)
	return status.Code(err)
}

// then is the call after a case: on the same client, which reconnects if the server closed its
// connection (a call under way then ends UNAVAILABLE, and is tried again, three times at most), so
// that it tells whether the server still serves.
func then(conn *grpc.ClientConn) codes.Code {
	code := codes.Unavailable
	for i := 0; i < 3 && code == codes.Unavailable; i++ {
		code = call(conn, "Refresh", nil, 10*time.Second, grpc.WaitForReady(true))
	}
	return code
}

// stormAnswer is what a storm of calls that end early answers: the codes other than those
// expected, whether some were refused or lost with their connection (RESOURCE_EXHAUSTED,
// UNAVAILABLE), and the call after it.
func stormAnswer(counts *codeCounts, early codes.Code, conn *grpc.ClientConn) map[string]any {
	all := counts.all()
	return map[string]any{
		"unexpected":      counts.except(codes.OK, early, codes.ResourceExhausted, codes.Unavailable),
		"refusedOrClosed": all[codes.ResourceExhausted.String()]+all[codes.Unavailable.String()] > 0,
		"then":            then(conn).String(),
	}
}

// call is one call with a timeout of its own.
func call(conn *grpc.ClientConn, method string, req frame, timeout time.Duration, opts ...grpc.CallOption) codes.Code {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return invoke(ctx, conn, method, req, opts...)
}

// nodeRequest is a NodeGroupForNodeRequest for a node whose providerID is id.
func nodeRequest(id string) frame {
	node := protowire.AppendTag(nil, 1, protowire.BytesType)
	node = protowire.AppendString(node, id)
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(req, node)
}

// codeCounts counts status codes by name, safely from many goroutines.
type codeCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *codeCounts) add(code codes.Code) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[code.String()]++
}

// except is every code counted but the ones named, with its count.
func (c *codeCounts) except(allowed ...codes.Code) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.m {
		ok := false
		for _, a := range allowed {
			if a.String() == k {
				ok = true
			}
		}
		if !ok {
			out[k] = v
		}
	}
	return out
}

func (c *codeCounts) all() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// latencies collects call durations.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) percentile(p float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l.d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p / 100 * float64(len(s)))
	if i >= len(s) {
		i = len(s) - 1
	}
	return float64(s[i].Microseconds()) / 1000
}

// parallel runs n jobs on workers goroutines.
func parallel(n, workers int, job func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				job(i)
			}
		}()
	}
	wg.Wait()
}

// --- cases a grpc-go client makes -------------------------------------------------------------------

// loadOneConnection: many calls at once over one connection; every one must succeed.
func loadOneConnection(e *env) (map[string]any, map[string]any, error) {
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	var counts codeCounts
	var lat latencies
	start := time.Now()
	parallel(e.calls, 64, func(int) {
		t := time.Now()
		counts.add(call(conn, "NodeGroups", nil, 10*time.Second))
		lat.add(time.Since(t))
	})
	return map[string]any{"codes": counts.all()},
		map[string]any{"seconds": time.Since(start).Seconds(), "p50_ms": lat.percentile(50), "p99_ms": lat.percentile(99)}, nil
}

// loadManyConnections: 50 connections, each making calls one after the other, all at once.
func loadManyConnections(e *env) (map[string]any, map[string]any, error) {
	const conns = 50
	var counts codeCounts
	var lat latencies
	start := time.Now()
	var dialErr atomic.Value
	parallel(conns, conns, func(int) {
		conn, err := dial(e)
		if err != nil {
			dialErr.Store(err)
			return
		}
		defer conn.Close()
		for i := 0; i < e.calls/conns; i++ {
			t := time.Now()
			counts.add(call(conn, "NodeGroups", nil, 10*time.Second))
			lat.add(time.Since(t))
		}
	})
	if err, ok := dialErr.Load().(error); ok {
		return nil, nil, err
	}
	return map[string]any{"codes": counts.all()},
		map[string]any{"seconds": time.Since(start).Seconds(), "p50_ms": lat.percentile(50), "p99_ms": lat.percentile(99)}, nil
}

// gzipRequest: a request compressed with gzip.
func gzipRequest(e *env) (map[string]any, map[string]any, error) {
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	code := call(conn, "NodeGroupForNode", nodeRequest(strings.Repeat("gzip://", 1000)), 10*time.Second, grpc.UseCompressor(gzip.Name))
	return map[string]any{"code": code.String()}, map[string]any{}, nil
}

// requestOver4MiB: a 5 MiB request is refused, and the same connection still serves.
func requestOver4MiB(e *env) (map[string]any, map[string]any, error) {
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	code := call(conn, "NodeGroupForNode", nodeRequest(strings.Repeat("x", 5<<20)), 10*time.Second)
	return map[string]any{"code": code.String(), "then": then(conn).String()}, map[string]any{}, nil
}

// tinyDeadlines: calls with a 1 ms deadline end OK or DEADLINE_EXCEEDED, and the connection serves.
func tinyDeadlines(e *env) (map[string]any, map[string]any, error) {
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	var counts codeCounts
	parallel(1000, 16, func(int) {
		counts.add(call(conn, "NodeGroups", nil, time.Millisecond))
	})
	return stormAnswer(&counts, codes.DeadlineExceeded, conn), map[string]any{"codes": counts.all()}, nil
}

// cancellationStorm: calls cancelled by the client at random moments; the connection serves on.
func cancellationStorm(e *env) (map[string]any, map[string]any, error) {
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	var counts codeCounts
	parallel(e.calls, 64, func(int) {
		ctx, cancel := context.WithCancel(context.Background())
		t := time.AfterFunc(time.Duration(rand.IntN(1000))*time.Microsecond, cancel)
		counts.add(invoke(ctx, conn, "NodeGroupForNode", nodeRequest("storm://node")))
		t.Stop()
		cancel()
	})
	return stormAnswer(&counts, codes.Canceled, conn), map[string]any{"codes": counts.all()}, nil
}

// unknownMethod: an unknown method of the service, and an unknown service.
func unknownMethod(e *env) (map[string]any, map[string]any, error) {
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	method := call(conn, "NoSuchMethod", nil, 10*time.Second)
	var reply frame
	svcErr := conn.Invoke(context.Background(), "/no.such.Service/Method", &frame{}, &reply)
	return map[string]any{"method": method.String(), "service": status.Code(svcErr).String()}, map[string]any{}, nil
}

// manyStreamsOneConnection: thousands of calls started at once on one connection (the client
// queues what the server's stream limit does not admit); every one must succeed.
func manyStreamsOneConnection(e *env) (map[string]any, map[string]any, error) {
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	var counts codeCounts
	start := time.Now()
	parallel(e.calls, e.calls, func(int) {
		counts.add(call(conn, "NodeGroupForNode", nodeRequest("many://node"), 30*time.Second))
	})
	return map[string]any{"codes": counts.all()}, map[string]any{"seconds": time.Since(start).Seconds()}, nil
}

// connectionChurn: connections opened, used once and closed; the suite looks at the server's open
// files and memory before and after.
func connectionChurn(e *env) (map[string]any, map[string]any, error) {
	var counts codeCounts
	start := time.Now()
	parallel(e.connections, 8, func(int) {
		conn, err := dial(e)
		if err != nil {
			counts.add(codes.Unknown)
			return
		}
		counts.add(call(conn, "Refresh", nil, 10*time.Second))
		_ = conn.Close()
	})
	return map[string]any{"codes": counts.all()}, map[string]any{"seconds": time.Since(start).Seconds()}, nil
}

// flood: a client whose certificate is valid opens e.streams streams over e.connections
// connections, each sending a message of e.streamBytes and never ending it; beside it another
// client makes a small call every 10 ms. The suite watches the server's memory meanwhile.
func flood(e *env) (map[string]any, map[string]any, error) {
	conns := make([]*grpc.ClientConn, e.connections)
	for i := range conns {
		c, err := dial(e)
		if err != nil {
			return nil, nil, err
		}
		defer c.Close()
		conns[i] = c
	}
	victim, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer victim.Close()
	if code := call(victim, "Refresh", nil, 10*time.Second); code != codes.OK {
		return nil, nil, fmt.Errorf("the other client's first call: %s", code)
	}
	payload := make(frame, e.streamBytes)
	var streamCodes codeCounts
	var victimCodes codeCounts
	var lat latencies
	done := make(chan struct{})
	var slowMu sync.Mutex
	var slow []string
	start := time.Now()
	var victimDone sync.WaitGroup
	victimDone.Add(1)
	go func() {
		defer victimDone.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				t := time.Now()
				victimCodes.add(call(victim, "NodeGroupForNode", nodeRequest("victim://node"), 5*time.Second))
				d := time.Since(t)
				lat.add(d)
				if d > 50*time.Millisecond {
					slowMu.Lock()
					slow = append(slow, fmt.Sprintf("%.1fs:%dms", t.Sub(start).Seconds(), d.Milliseconds()))
					slowMu.Unlock()
				}
			}
		}
	}()
	desc := &grpc.StreamDesc{ClientStreams: true}
	parallel(e.streams, e.streams, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), e.streamDeadline)
		defer cancel()
		cs, err := conns[i%len(conns)].NewStream(ctx, desc, "/"+service+"/NodeGroupForNode")
		if err != nil {
			streamCodes.add(status.Code(err))
			return
		}
		_ = cs.SendMsg(&payload)
		var reply frame
		streamCodes.add(status.Code(cs.RecvMsg(&reply)))
	})
	elapsed := time.Since(start)
	close(done)
	victimDone.Wait()
	return map[string]any{"otherClientFailed": victimCodes.except(codes.OK)},
		map[string]any{
			"seconds": elapsed.Seconds(), "streamCodes": streamCodes.all(), "otherClientCalls": victimCodes.all(),
			"other_p50_ms": lat.percentile(50), "other_p99_ms": lat.percentile(99), "other_max_ms": lat.percentile(100),
			"other_slow_calls": slow,
		}, nil
}

// --- cases no grpc-go client makes: golang.org/x/net's HTTP/2 ------------------------------------

func h2Transport(e *env) *http2.Transport {
	cfg := e.tls.Clone()
	cfg.NextProtos = []string{"h2"}
	return &http2.Transport{TLSClientConfig: cfg}
}

// grpcAnswer is a response's HTTP status and grpc-status ("none" when the response has none).
func grpcAnswer(resp *http.Response) string {
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	gs := resp.Header.Get("grpc-status")
	if gs == "" {
		gs = resp.Trailer.Get("grpc-status")
	}
	if gs == "" {
		gs = "none"
	}
	return fmt.Sprintf("http %d, grpc-status %s", resp.StatusCode, gs)
}

// notGRPC: requests that are not gRPC: HTTP/2 with another content type or method, HTTP/1.1 over
// TLS, and plaintext on the TLS port.
func notGRPC(e *env) (map[string]any, map[string]any, error) {
	tr := h2Transport(e)
	defer tr.CloseIdleConnections()
	url := "https://" + e.target + "/" + service + "/Refresh"
	ask := func(method, contentType string) string {
		req, _ := http.NewRequest(method, url, bytes.NewReader([]byte("{}")))
		req.Header.Set("content-type", contentType)
		req.Header.Set("te", "trailers")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return "error: " + err.Error()
		}
		return grpcAnswer(resp)
	}
	answer := map[string]any{
		"postJSON":   ask(http.MethodPost, "application/json"),
		"getGRPC":    ask(http.MethodGet, "application/grpc"),
		"http1":      http1(e),
		"plaintext":  plaintext(e),
		"connection": "",
	}
	// The connection still serves a gRPC client afterwards.
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	answer["connection"] = call(conn, "Refresh", nil, 10*time.Second).String()
	return answer, map[string]any{}, nil
}

// http1 is what an HTTP/1.1 client over TLS (ALPN http/1.1) gets.
func http1(e *env) string {
	cfg := e.tls.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.target, cfg)
	if err != nil {
		return "handshake refused"
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "no answer in 5 s"
		}
		return "closed without an answer"
	}
	return "answered " + strings.TrimSpace(line)
}

// plaintext is what an HTTP/1.1 request without TLS on the TLS port gets.
func plaintext(e *env) string {
	c, err := net.DialTimeout("tcp", e.target, 5*time.Second)
	if err != nil {
		return "connect refused"
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "no answer in 5 s"
		}
		return "closed"
	}
	// A TLS alert or anything else: the server wrote before closing.
	return "closed after an answer"
}

// stalledBody: a request whose body starts (the message prefix and 10 of its 100 bytes) and then
// stops, with or without grpc-timeout; what comes back within e.wait.
func stalledBody(e *env, withDeadline bool) (map[string]any, map[string]any, error) {
	code, ms, err := stalled(e, withDeadline, true)
	if err != nil {
		return nil, nil, err
	}
	if !withDeadline {
		return map[string]any{"code": code}, map[string]any{"ms": ms}, nil
	}
	// grpc-go ends the call at its deadline either way: a DEADLINE_EXCEEDED status, or a reset
	// (CANCEL) from its deadline timer when that comes first; counted from the headers (300 ms).
	ended := code == codes.DeadlineExceeded.String() || code == "reset "+http2.ErrCodeCancel.String()
	return map[string]any{"endedAtDeadline": ended && ms >= 250 && ms < 1300}, map[string]any{"code": code, "ms": ms}, nil
}

// stalled opens a call on a connection of its own (raw frames), with or without grpc-timeout
// (300 ms), sends the start of a body (the message prefix for 100 bytes and 10 of them) or none, and
// stops there; it returns the grpc-status that came back within e.wait ("none"; "reset CODE" for a
// stream reset without a status) and after how many milliseconds.
func stalled(e *env, withDeadline, someBody bool) (string, int64, error) {
	r, err := dialRaw(e)
	if err != nil {
		return "", 0, err
	}
	defer r.c.Close()
	var extra [][2]string
	if withDeadline {
		extra = append(extra, [2]string{"grpc-timeout", "300m"})
	}
	start := time.Now()
	if err := r.open("Refresh", extra...); err != nil {
		return "", 0, err
	}
	if someBody {
		if err := r.fr.WriteData(1, false, append([]byte{0, 0, 0, 0, 100}, make([]byte, 10)...)); err != nil {
			return "", 0, err
		}
	}
	answer := "none"
	var ms int64
	dec := hpack.NewDecoder(4096, nil)
	r.frames(start.Add(e.wait), true, func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				return false
			}
			for _, hf := range fields {
				if hf.Name == "grpc-status" {
					var n int
					_, _ = fmt.Sscan(hf.Value, &n)
					answer, ms = codes.Code(n).String(), time.Since(start).Milliseconds()
					return false
				}
			}
		case *http2.RSTStreamFrame:
			answer, ms = "reset "+f.ErrCode.String(), time.Since(start).Milliseconds()
			return false
		case *http2.GoAwayFrame:
			answer, ms = "goaway "+f.ErrCode.String(), time.Since(start).Milliseconds()
			return false
		}
		return true
	})
	if answer == "none" {
		ms = time.Since(start).Milliseconds()
	}
	return answer, ms, nil
}

// clientNotAllowed: the client's certificate is signed by the right CA but names a client the
// server does not allow: a stream with headers and no body, and a unary call.
func clientNotAllowed(e *env) (map[string]any, map[string]any, error) {
	code, ms, err := stalled(e, false, false)
	if err != nil {
		return nil, nil, err
	}
	conn, err := dial(e)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	unary := call(conn, "Refresh", nil, 10*time.Second)
	return map[string]any{"headersOnly": code, "unary": unary.String()}, map[string]any{"headersOnly_ms": ms}, nil
}

// --- cases on raw HTTP/2 frames --------------------------------------------------------------------

// rawConn is an HTTP/2 connection over TLS whose frames the case writes itself; the server's
// SETTINGS are acknowledged, and nothing else is done for the client.
type rawConn struct {
	c      *tls.Conn
	fr     *http2.Framer
	hbuf   bytes.Buffer
	henc   *hpack.Encoder
	nextID uint32
}

func dialRaw(e *env) (*rawConn, error) {
	cfg := e.tls.Clone()
	cfg.NextProtos = []string{"h2"}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.target, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		return nil, err
	}
	r := &rawConn{c: c, fr: http2.NewFramer(c, c), nextID: 1}
	r.henc = hpack.NewEncoder(&r.hbuf)
	if err := r.fr.WriteSettings(); err != nil {
		return nil, err
	}
	return r, nil
}

// open writes a HEADERS frame of a gRPC call to method, without ending the stream.
func (r *rawConn) open(method string, extra ...[2]string) error {
	r.hbuf.Reset()
	for _, f := range append([][2]string{
		{":method", "POST"}, {":scheme", "https"}, {":path", "/" + service + "/" + method},
		{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"},
	}, extra...) {
		_ = r.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	id := r.nextID
	r.nextID += 2
	return r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hbuf.Bytes(), EndHeaders: true})
}

// frames reads frames until the deadline or the connection's end, acknowledging SETTINGS and
// PINGs (when ackPings), and hands each to seen; seen returning false stops the reading.
func (r *rawConn) frames(until time.Time, ackPings bool, seen func(http2.Frame) bool) {
	_ = r.c.SetReadDeadline(until)
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = r.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if ackPings && !f.IsAck() {
				_ = r.fr.WritePing(true, f.Data)
			}
		}
		if !seen(f) {
			return
		}
	}
}

// streamsPastTheLimit: a client that reads the server's SETTINGS but opens 300 streams at once
// (headers only), past the advertised 100.
func streamsPastTheLimit(e *env) (map[string]any, map[string]any, error) {
	r, err := dialRaw(e)
	if err != nil {
		return nil, nil, err
	}
	defer r.c.Close()
	var advertised uint32
	r.frames(time.Now().Add(2*time.Second), true, func(f http2.Frame) bool {
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			if v, ok := s.Value(http2.SettingMaxConcurrentStreams); ok {
				advertised = v
			}
			return false
		}
		return true
	})
	for i := 0; i < 300; i++ {
		if err := r.open("Refresh"); err != nil {
			return nil, nil, err
		}
	}
	refused := 0
	var goaway string
	r.frames(time.Now().Add(1500*time.Millisecond), true, func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.ErrCode == http2.ErrCodeRefusedStream {
				refused++
			}
		case *http2.GoAwayFrame:
			goaway = f.ErrCode.String()
			return false
		}
		return true
	})
	// Still open: a PING is answered.
	connection := "closed"
	if err := r.fr.WritePing(false, [8]byte{'a', 'l', 'i', 'v', 'e'}); err == nil {
		r.frames(time.Now().Add(2*time.Second), true, func(f http2.Frame) bool {
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == [8]byte{'a', 'l', 'i', 'v', 'e'} {
				connection = "open"
				return false
			}
			return true
		})
	}
	return map[string]any{"refused": refused, "connection": connection},
		map[string]any{"advertised": advertised, "goaway": goaway}, nil
}

// pingFlood: PING frames every 5 ms on a connection without streams.
func pingFlood(e *env) (map[string]any, map[string]any, error) {
	r, err := dialRaw(e)
	if err != nil {
		return nil, nil, err
	}
	defer r.c.Close()
	var mu sync.Mutex
	sent := 0
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for i := 0; i < 200; i++ {
			select {
			case <-stop:
				return
			case <-t.C:
				mu.Lock()
				err := r.fr.WritePing(false, [8]byte{byte(i)})
				if err == nil {
					sent++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}
	}()
	answer := map[string]any{"goaway": "none"}
	acked := 0
	r.frames(time.Now().Add(3*time.Second), false, func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.PingFrame:
			if f.IsAck() {
				acked++
			}
		case *http2.GoAwayFrame:
			answer["goaway"] = f.ErrCode.String()
			answer["debug"] = string(f.DebugData())
			return false
		}
		return true
	})
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	return answer, map[string]any{"pingsSent": sent, "pingsAcked": acked}, nil
}
