// h3get: an HTTP/3 client on quic-go's http3 package, for `cargo xtask http3`.
//
// It sends -n GET requests for one URL at once, over one QUIC connection (the
// transport keeps one per host), and prints one JSON object per response: status,
// protocol, headers, body length and SHA-256, and with -body the body itself.
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
	"strings"
	"sync"

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
	transport := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: *serverName},
	}
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
