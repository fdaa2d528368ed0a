// Command loadclient sends admission and authorization reviews to a webhook address the way
// kube-apiserver's webhook client does, and counts every review that does not get its answer.
//
// The client is Go's net/http, set up as client-go sets up a webhook's transport: HTTP/2 by
// ALPN (or HTTP/1.1 keep-alive only, with -proto http1), at most 25 idle connections per host,
// a 3 s timeout per review. net/http never retries a POST whose request was written, and a
// refused or reset connection is an error, so every review lost by the server or a load
// balancer in front of it is counted as failed. Each of -clients transports stands for one
// apiserver's webhook client: with HTTP/2 each holds one connection.
//
// Reviews are read from -spec (a JSON list of {"name", "path", "file"}). Before the load, each
// is sent once and its answer kept; under load, an answer that differs from it is counted as
// wrong. The client prints {"ready":true} on stdout when the load starts, runs until its
// standard input is closed (or SIGTERM), waits for the reviews in flight, and prints a JSON
// summary on stdout. Each failure is a JSON line in -failures.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type review struct {
	Name string `json:"name"`
	Path string `json:"path"`
	File string `json:"file"`
	body []byte
	want []byte
}

type failure struct {
	Review  string `json:"review"`
	Path    string `json:"path"`
	Error   string `json:"error"`
	Status  int    `json:"status,omitempty"`
	Reused  bool   `json:"reused"`
	Written bool   `json:"written"`
	// Unix nanoseconds: when the review was handed to the client, and when it failed.
	StartNs int64 `json:"start_ns"`
	EndNs   int64 `json:"end_ns"`
}

type summary struct {
	Proto       string         `json:"proto"`
	Seconds     float64        `json:"seconds"`
	Sent        int64          `json:"sent"`
	OK          int64          `json:"ok"`
	Failed      int64          `json:"failed"`
	Wrong       int64          `json:"wrong"`
	HTTP2       int64          `json:"http2"`
	HTTP1       int64          `json:"http1"`
	Close       int64          `json:"connection_close"`
	NewConns    int64          `json:"new_connections"`
	MaxInFlight int64          `json:"max_in_flight"`
	Behind      int64          `json:"behind"`
	Errors      map[string]int `json:"errors"`
}

type stats struct {
	sent, ok, failed, wrong       atomic.Int64
	http2, http1, close, newConns atomic.Int64
	inFlight, maxInFlight, behind atomic.Int64
	mu                            sync.Mutex
	errors                        map[string]int
	failures                      *json.Encoder
}

func (s *stats) fail(f failure) {
	s.failed.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errors[classify(f.Error)]++
	_ = s.failures.Encode(f)
}

// classify shortens an error to its kind, without addresses and ports.
func classify(text string) string {
	for _, kind := range []string{
		"connection refused", "connection reset by peer", "EOF", "broken pipe",
		"Client.Timeout", "context deadline exceeded", "GOAWAY", "client connection lost",
		"server sent GOAWAY", "stream error", "wrong answer", "status",
	} {
		if strings.Contains(text, kind) {
			return kind
		}
	}
	return text
}

func transport(proto string, roots *x509.CertPool) *http.Transport {
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
	}
	if proto == "h2" {
		t.ForceAttemptHTTP2 = true
		// client-go's health check of an HTTP/2 connection.
		t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	} else {
		tlsConfig.NextProtos = []string{"http/1.1"}
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return t
}

// send posts one review; the answer's status and body, and whether a connection was reused
// and the request written.
func send(ctx context.Context, client *http.Client, url string, r *review, s *stats) (int, []byte, bool, bool, error) {
	var reused, written atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			reused.Store(info.Reused)
			if !info.Reused {
				s.newConns.Add(1)
			}
		},
		WroteRequest: func(httptrace.WroteRequestInfo) { written.Store(true) },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, url+r.Path, bytes.NewReader(r.body))
	if err != nil {
		return 0, nil, false, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, reused.Load(), written.Load(), err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.ProtoMajor == 2 {
		s.http2.Add(1)
	} else {
		s.http1.Add(1)
	}
	if resp.Close {
		s.close.Add(1)
	}
	return resp.StatusCode, body, reused.Load(), written.Load(), err
}

func main() {
	target := flag.String("target", "", "host:port of the webhooks (TLS)")
	caFile := flag.String("ca", "", "CA certificate of the serving certificate (PEM)")
	proto := flag.String("proto", "h2", "h2 (HTTP/2 by ALPN) or http1 (HTTP/1.1 keep-alive)")
	rate := flag.Float64("rate", 2000, "reviews per second, over all workers")
	workers := flag.Int("workers", 64, "reviews in flight at most")
	clients := flag.Int("clients", 6, "independent transports (apiserver webhook clients)")
	timeout := flag.Duration("timeout", 3*time.Second, "timeout of one review (the webhooks' timeoutSeconds)")
	specFile := flag.String("spec", "", "JSON list of the reviews to send")
	failuresFile := flag.String("failures", "", "where to write one JSON line per failed review")
	flag.Parse()
	if err := run(*target, *caFile, *proto, *rate, *workers, *clients, *timeout, *specFile, *failuresFile); err != nil {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(1)
	}
}

func run(target, caFile, proto string, rate float64, workers, clients int, timeout time.Duration, specFile, failuresFile string) error {
	if proto != "h2" && proto != "http1" {
		return fmt.Errorf("-proto must be h2 or http1, not %q", proto)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return errors.New("no certificate in " + caFile)
	}
	var reviews []*review
	text, err := os.ReadFile(specFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(text, &reviews); err != nil {
		return fmt.Errorf("%s: %w", specFile, err)
	}
	if len(reviews) == 0 {
		return errors.New("no reviews in " + specFile)
	}
	for _, r := range reviews {
		if r.body, err = os.ReadFile(r.File); err != nil {
			return err
		}
	}
	out, err := os.Create(failuresFile)
	if err != nil {
		return err
	}
	defer out.Close()
	s := &stats{errors: map[string]int{}, failures: json.NewEncoder(out)}
	url := "https://" + target
	pool := make([]*http.Client, clients)
	for i := range pool {
		pool[i] = &http.Client{Transport: transport(proto, roots), Timeout: timeout}
	}

	// The reference answers, from whichever replica answers first.
	for _, r := range reviews {
		status, body, _, _, err := send(context.Background(), pool[0], url, r, s)
		if err != nil || status != http.StatusOK {
			return fmt.Errorf("reference answer of %s %s: status %d, %v", r.Name, r.Path, status, err)
		}
		r.want = body
	}
	s.newConns.Store(0)
	s.http1.Store(0)
	s.http2.Store(0)
	s.close.Store(0)

	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	// Open loop: a token per review at the rate; a token no worker can take is counted as
	// behind instead of piling up.
	tokens := make(chan struct{}, workers)
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		client := pool[w%clients]
		go func() {
			defer wg.Done()
			for range tokens {
				r := reviews[int(next.Add(1))%len(reviews)]
				n := s.inFlight.Add(1)
				for {
					seen := s.maxInFlight.Load()
					if n <= seen || s.maxInFlight.CompareAndSwap(seen, n) {
						break
					}
				}
				s.sent.Add(1)
				start := time.Now()
				status, body, reused, written, err := send(context.Background(), client, url, r, s)
				s.inFlight.Add(-1)
				f := failure{Review: r.Name, Path: r.Path, Status: status, Reused: reused, Written: written, StartNs: start.UnixNano(), EndNs: time.Now().UnixNano()}
				switch {
				case err != nil:
					f.Error = err.Error()
					s.fail(f)
				case status != http.StatusOK:
					f.Error = fmt.Sprintf("status %d: %.200s", status, body)
					s.fail(f)
				case !bytes.Equal(body, r.want):
					s.wrong.Add(1)
					f.Error = fmt.Sprintf("wrong answer: %.300s", body)
					s.fail(f)
				default:
					s.ok.Add(1)
				}
			}
		}()
	}

	fmt.Println(`{"ready":true}`)
	began := time.Now()
	tick := time.NewTicker(time.Millisecond)
	owed := 0.0
	last := began
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-signals:
			break loop
		case now := <-tick.C:
			owed += rate * now.Sub(last).Seconds()
			last = now
			for ; owed >= 1; owed-- {
				select {
				case tokens <- struct{}{}:
				default:
					s.behind.Add(1)
				}
			}
		}
	}
	tick.Stop()
	close(tokens)
	wg.Wait()

	sum := summary{
		Proto: proto, Seconds: time.Since(began).Seconds(),
		Sent: s.sent.Load(), OK: s.ok.Load(), Failed: s.failed.Load(), Wrong: s.wrong.Load(),
		HTTP2: s.http2.Load(), HTTP1: s.http1.Load(), Close: s.close.Load(),
		NewConns: s.newConns.Load(), MaxInFlight: s.maxInFlight.Load(), Behind: s.behind.Load(),
		Errors: s.errors,
	}
	text, err = json.Marshal(sum)
	if err != nil {
		return err
	}
	fmt.Println(string(text))
	return nil
}
