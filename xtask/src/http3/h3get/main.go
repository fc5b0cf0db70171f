// h3get: an HTTP/3 client on quic-go's http3 package, for `cargo xtask http3` and
// `cargo xtask loadtest --h3`.
//
// It sends -n GET requests for one URL at once, over one QUIC connection (the
// transport keeps one per host), and prints one JSON object per response: status,
// protocol, headers, body length and SHA-256, and with -body the body itself.
//
// With -load DURATION it is a load generator instead: -c connections (a transport of
// its own each), -m requests in flight on each, for DURATION; it prints one JSON
// object with the requests completed, the body bytes, the errors and the latency
// percentiles.
package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

type result struct {
	Status  int               `json:"status"`
	Proto   string            `json:"proto"`
	Headers map[string]string `json:"headers"`
	Length  int64             `json:"length"`
	Sha256  string            `json:"sha256"`
	Body    string            `json:"body,omitempty"`
	Error   string            `json:"error,omitempty"`
}

func main() {
	ca := flag.String("ca", "", "PEM file of the CA to trust")
	serverName := flag.String("servername", "localhost", "the name the certificate must have")
	n := flag.Int("n", 1, "requests sent at once, on one connection")
	withBody := flag.Bool("body", false, "print each body")
	var headers headerFlags
	flag.Var(&headers, "H", "a request header, 'Name: value' (repeatable)")
	load := flag.Duration("load", 0, "generate load for this long instead")
	conns := flag.Int("c", 1, "with -load: connections")
	streams := flag.Int("m", 1, "with -load: requests in flight on each connection")
	flag.Parse()
	if flag.NArg() != 1 || *ca == "" {
		fmt.Fprintln(os.Stderr, "usage: h3get -ca CA.pem [-n N] [-body] [-H 'Name: value']... URL")
		os.Exit(2)
	}
	pem, err := os.ReadFile(*ca)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h3get:", err)
		os.Exit(1)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fmt.Fprintln(os.Stderr, "h3get: no certificate in", *ca)
		os.Exit(1)
	}
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: *serverName}
	if *load > 0 {
		report := generate(tlsConfig, flag.Arg(0), *load, *conns, *streams)
		if err := json.NewEncoder(os.Stdout).Encode(report); err != nil {
			fmt.Fprintln(os.Stderr, "h3get:", err)
			os.Exit(1)
		}
		return
	}
	transport := &http3.Transport{TLSClientConfig: tlsConfig}
	defer transport.Close()
	client := &http.Client{Transport: transport}
	results := make([]result, *n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = get(client, flag.Arg(0), headers, *withBody)
		}(i)
	}
	wg.Wait()
	out := json.NewEncoder(os.Stdout)
	for _, r := range results {
		if err := out.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "h3get:", err)
			os.Exit(1)
		}
	}
}

func get(client *http.Client, url string, headers headerFlags, withBody bool) result {
	request, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return result{Error: err.Error()}
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		request.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	response, err := client.Do(request)
	if err != nil {
		return result{Error: err.Error()}
	}
	defer response.Body.Close()
	r := result{Status: response.StatusCode, Proto: response.Proto, Headers: map[string]string{}}
	for name, values := range response.Header {
		r.Headers[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	hash := sha256.New()
	var body strings.Builder
	var sink io.Writer = hash
	if withBody {
		sink = io.MultiWriter(hash, &body)
	}
	r.Length, err = io.Copy(sink, response.Body)
	if err != nil {
		r.Error = err.Error()
	}
	r.Sha256 = hex.EncodeToString(hash.Sum(nil))
	r.Body = body.String()
	return r
}

type loadReport struct {
	Requests uint64  `json:"requests"`
	Bytes    uint64  `json:"bytes"`
	Errors   uint64  `json:"errors"`
	Seconds  float64 `json:"seconds"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	// The first error seen, if any: what the errors were.
	FirstError string `json:"first_error,omitempty"`
}

// generate keeps `streams` GETs of url in flight on each of `conns` connections for
// `duration`: body bytes count as they arrive, a request once its body is whole.
func generate(tlsConfig *tls.Config, url string, duration time.Duration, conns, streams int) loadReport {
	var requests, bytes, errors atomic.Uint64
	var firstError atomic.Value
	started := time.Now()
	deadline := started.Add(duration)
	// An error counts until the deadline; after it the transports are closed under the
	// requests still in flight, which then fail by design.
	fail := func(err error) {
		if time.Now().Before(deadline) {
			errors.Add(1)
			firstError.CompareAndSwap(nil, err.Error())
		}
	}
	var mu sync.Mutex
	var latencies []time.Duration
	var wg sync.WaitGroup
	transports := make([]*http3.Transport, conns)
	for c := range transports {
		transport := &http3.Transport{TLSClientConfig: tlsConfig}
		transports[c] = transport
		client := &http.Client{Transport: transport}
		for s := 0; s < streams; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 64<<10)
				var mine []time.Duration
				for time.Now().Before(deadline) {
					begun := time.Now()
					response, err := client.Get(url)
					if err != nil {
						fail(err)
						continue
					}
					// Bytes count as they come, so that a large body still in flight
					// at the end counts for what arrived; a request counts once whole.
					whole := false
					for time.Now().Before(deadline) {
						k, err := response.Body.Read(buf)
						bytes.Add(uint64(k))
						if err == io.EOF {
							whole = true
							break
						}
						if err != nil {
							fail(err)
							break
						}
					}
					response.Body.Close()
					if !whole {
						break
					}
					if response.StatusCode != http.StatusOK {
						fail(fmt.Errorf("status %d", response.StatusCode))
						continue
					}
					requests.Add(1)
					mine = append(mine, time.Since(begun))
				}
				mu.Lock()
				latencies = append(latencies, mine...)
				mu.Unlock()
			}()
		}
	}
	// At the deadline every connection closes: no request still in flight then (a
	// large body) keeps the generator waiting.
	time.AfterFunc(time.Until(deadline), func() {
		for _, transport := range transports {
			transport.Close()
		}
	})
	wg.Wait()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	percentile := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	first, _ := firstError.Load().(string)
	return loadReport{
		FirstError: first,
		Requests:   requests.Load(),
		Bytes:      bytes.Load(),
		Errors:     errors.Load(),
		Seconds:    duration.Seconds(),
		P50Ms:      percentile(0.50),
		P99Ms:      percentile(0.99),
	}
}
