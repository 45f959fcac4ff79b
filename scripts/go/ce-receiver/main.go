// ce-receiver receives CloudEvents over HTTP with the official CloudEvents Go SDK
// (github.com/cloudevents/sdk-go/v2): binary and structured requests through the SDK client's
// StartReceiver on its HTTP protocol, batch requests through the SDK's
// NewEventsFromHTTPRequest. Every event is checked with event.Validate() and printed on
// standard output as one JSON line:
//
//	{"mode":"binary","proto":"HTTP/2.0","auth":"Bearer ...","gzip":false,"valid":true,"error":"","event":{...}}
//
// The first line says where it listens: {"listening":"127.0.0.1:PORT"}.
//
// kubecast's HTTP sink tests and benchmarks run it as the receiver that was not written here.
//
// usage: ce-receiver -addr 127.0.0.1:PORT [-cert FILE -key FILE [-client-ca FILE]] [-quiet]
package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	nethttp "net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

type line struct {
	Mode  string       `json:"mode"`
	Proto string       `json:"proto"`
	Auth  string       `json:"auth"`
	Gzip  bool         `json:"gzip"`
	Valid bool         `json:"valid"`
	Error string       `json:"error"`
	Event *event.Event `json:"event"`
}

var (
	out   = bufio.NewWriterSize(os.Stdout, 1<<20)
	outMu sync.Mutex
	quiet = flag.Bool("quiet", false, "print only a count of events every second (benchmarks)")
	count atomic.Int64
)

func emit(mode, proto, auth string, gzipped bool, e *event.Event) {
	count.Add(1)
	if *quiet {
		return
	}
	l := line{Mode: mode, Proto: proto, Auth: auth, Gzip: gzipped, Event: e, Valid: true}
	if err := e.Validate(); err != nil {
		l.Valid, l.Error = false, err.Error()
	}
	b, err := json.Marshal(l)
	if err != nil {
		b, _ = json.Marshal(line{Mode: mode, Error: err.Error()})
	}
	outMu.Lock()
	out.Write(b)
	out.WriteByte('\n')
	out.Flush()
	outMu.Unlock()
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on (loopback)")
	cert := flag.String("cert", "", "serving certificate (PEM); with -key, serve HTTPS (HTTP/2 offered)")
	key := flag.String("key", "", "serving key (PEM)")
	clientCA := flag.String("client-ca", "", "require client certificates signed by this CA (PEM)")
	flag.Parse()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fail(err)
	}
	bound := ln.Addr().String()
	if *cert != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			fail(err)
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2", "http/1.1"}}
		if *clientCA != "" {
			pem, err := os.ReadFile(*clientCA)
			if err != nil {
				fail(err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				fail(fmt.Errorf("no certificate in %s", *clientCA))
			}
			cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		// net/http serves HTTP/2 on a TLS listener that negotiates "h2".
		ln = tls.NewListener(ln, cfg)
	}
	// Batch requests are read with the SDK's NewEventsFromHTTPRequest before the protocol
	// (whose receiver takes binary and structured requests); the protocol's request data
	// carries no protocol version, so it rides along in a header.
	batch := func(next nethttp.Handler) nethttp.Handler {
		return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
			// gzip request bodies (kubecast's `compression: gzip`), which net/http leaves
			// compressed.
			if r.Header.Get("Content-Encoding") == "gzip" {
				z, err := gzip.NewReader(r.Body)
				if err != nil {
					nethttp.Error(w, err.Error(), nethttp.StatusBadRequest)
					return
				}
				r.Body, r.ContentLength = z, -1
				r.Header.Del("Content-Encoding")
				r.Header.Del("Content-Length")
				r.Header.Set("X-Ce-Receiver-Gzip", "true")
			}
			if strings.HasPrefix(r.Header.Get("Content-Type"), cloudevents.ApplicationCloudEventsBatchJSON) {
				events, err := cehttp.NewEventsFromHTTPRequest(r)
				if err != nil {
					nethttp.Error(w, err.Error(), nethttp.StatusBadRequest)
					return
				}
				for i := range events {
					emit("batch", r.Proto, r.Header.Get("Authorization"), r.Header.Get("X-Ce-Receiver-Gzip") == "true", &events[i])
				}
				w.WriteHeader(nethttp.StatusAccepted)
				return
			}
			r.Header.Set("X-Ce-Receiver-Proto", r.Proto)
			next.ServeHTTP(w, r)
		})
	}
	p, err := cehttp.New(cehttp.WithListener(ln), cehttp.WithMiddleware(batch), cehttp.WithRequestDataAtContextMiddleware())
	if err != nil {
		fail(err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		fail(err)
	}
	// The first line says where it listens; tests wait for it.
	outMu.Lock()
	fmt.Fprintf(out, "{\"listening\":%q}\n", bound)
	out.Flush()
	outMu.Unlock()
	if *quiet {
		go report()
	}
	err = c.StartReceiver(context.Background(), func(ctx context.Context, e cloudevents.Event) {
		mode, proto, auth, gzipped := "binary", "", "", false
		if rd := cehttp.RequestDataFromContext(ctx); rd != nil {
			if strings.HasPrefix(rd.Header.Get("Content-Type"), cloudevents.ApplicationCloudEventsJSON) {
				mode = "structured"
			}
			proto, auth = rd.Header.Get("X-Ce-Receiver-Proto"), rd.Header.Get("Authorization")
			gzipped = rd.Header.Get("X-Ce-Receiver-Gzip") == "true"
		}
		emit(mode, proto, auth, gzipped, &e)
	})
	fail(fmt.Errorf("the receiver stopped: %v", err))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "ce-receiver: %v\n", err)
	os.Exit(1)
}

// report prints the number of events received so far, once a second (with -quiet).
func report() {
	for range time.Tick(time.Second) {
		outMu.Lock()
		fmt.Fprintf(out, "{\"count\":%d}\n", count.Load())
		out.Flush()
		outMu.Unlock()
	}
}
