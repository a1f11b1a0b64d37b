// Command loadgen sends AdmissionReview bodies to a webhook over HTTPS, at a fixed rate (open
// loop) or as fast as a fixed number of connections allow (closed loop), and prints one JSON
// object with the counts and the latency distribution.
//
// Open loop: request i is due at start + i/rate whatever happened before it, and its latency is
// measured from that due time, so a server that stalls is charged for the requests queued behind
// the stall (no coordinated omission). Every run is bounded by -duration and -max-requests.
//
//	loadgen -url https://127.0.0.1:8443 -bodies bodies.jsonl -paths /validate,/mutate \
//	        -rate 500 -duration 10 -connections 64 -cacert ca.crt
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	Mode          string             `json:"mode"`
	Rate          float64            `json:"target_rate"`
	Connections   int                `json:"connections"`
	DurationS     float64            `json:"duration_s"`
	Requests      int64              `json:"requests"`
	Errors        int64              `json:"errors"`
	Non200        int64              `json:"non_200"`
	AchievedRPS   float64            `json:"achieved_rps"`
	LatencyMs     map[string]float64 `json:"latency_ms"`
	ServiceMs     map[string]float64 `json:"service_ms"`
	FirstErrorMsg string             `json:"first_error,omitempty"`
}

type sample struct {
	latency time.Duration // from the due time (open loop) or the send time (closed loop)
	service time.Duration // from the send time
}

func main() {
	url := flag.String("url", "", "base URL, e.g. https://127.0.0.1:8443")
	bodiesPath := flag.String("bodies", "", "file with one request body per line")
	pathsFlag := flag.String("paths", "/validate,/mutate", "comma-separated paths, used in turn")
	rate := flag.Float64("rate", 0, "requests per second (open loop); 0: closed loop")
	duration := flag.Float64("duration", 10, "seconds of load")
	warmup := flag.Float64("warmup", 0, "seconds of load before measuring (same mode)")
	connections := flag.Int("connections", 16, "connections (closed loop) or most in flight (open loop)")
	cacert := flag.String("cacert", "", "CA certificate (PEM) to trust; empty: skip verification")
	maxRequests := flag.Int("max-requests", 2000000, "stop after this many requests in any case")
	flag.Parse()
	if *url == "" || *bodiesPath == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -url and -bodies are required")
		os.Exit(2)
	}
	bodies, err := readBodies(*bodiesPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	paths := strings.Split(*pathsFlag, ",")
	client, err := newClient(*cacert, *connections)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	g := &generator{client: client, url: strings.TrimRight(*url, "/"), bodies: bodies, paths: paths}
	if *warmup > 0 {
		g.run(*rate, *warmup, *connections, *maxRequests)
	}
	res := g.run(*rate, *duration, *connections, *maxRequests)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

func readBodies(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var bodies [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) > 0 {
			bodies = append(bodies, append([]byte(nil), line...))
		}
	}
	if len(bodies) == 0 {
		return nil, fmt.Errorf("%s: no bodies", path)
	}
	return bodies, sc.Err()
}

func newClient(cacert string, connections int) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if cacert == "" {
		tlsConfig.InsecureSkipVerify = true
	} else {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no certificate", cacert)
		}
		tlsConfig.RootCAs = pool
	}
	transport := &http.Transport{
		TLSClientConfig:     tlsConfig,
		MaxIdleConns:        connections,
		MaxIdleConnsPerHost: connections,
		MaxConnsPerHost:     connections,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		IdleConnTimeout:     60 * time.Second,
	}
	return &http.Client{Transport: transport, Timeout: 30 * time.Second}, nil
}

type generator struct {
	client *http.Client
	url    string
	bodies [][]byte
	paths  []string

	errors   atomic.Int64
	non200   atomic.Int64
	errMu    sync.Mutex
	firstErr string
}

func (g *generator) send(i int) (time.Duration, bool) {
	path := g.paths[i%len(g.paths)]
	body := g.bodies[(i/len(g.paths))%len(g.bodies)]
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, g.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		g.errors.Add(1)
		g.noteError(err.Error())
		return time.Since(start), false
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		g.errors.Add(1)
		g.noteError(err.Error())
		return time.Since(start), false
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte(`"allowed"`)) {
		g.non200.Add(1)
		g.noteError(fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, data))
		return time.Since(start), false
	}
	return time.Since(start), true
}

func (g *generator) noteError(msg string) {
	g.errMu.Lock()
	if g.firstErr == "" {
		g.firstErr = msg
	}
	g.errMu.Unlock()
}

func (g *generator) run(rate, seconds float64, connections, maxRequests int) result {
	g.errors.Store(0)
	g.non200.Store(0)
	var mu sync.Mutex
	samples := make([]sample, 0, 1<<16)
	record := func(s sample) {
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	var count atomic.Int64
	start := time.Now()
	deadline := start.Add(time.Duration(seconds * float64(time.Second)))
	var wg sync.WaitGroup
	mode := "closed"
	if rate > 0 {
		mode = "open"
		type job struct {
			i   int
			due time.Time
		}
		total := int(math.Min(rate*seconds, float64(maxRequests)))
		jobs := make(chan job, total+1)
		for w := 0; w < connections; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range jobs {
					service, _ := g.send(j.i)
					record(sample{latency: time.Since(j.due), service: service})
					count.Add(1)
				}
			}()
		}
		interval := time.Duration(float64(time.Second) / rate)
		for i := 0; i < total; i++ {
			due := start.Add(time.Duration(i) * interval)
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			jobs <- job{i: i, due: due}
		}
		close(jobs)
	} else {
		var next atomic.Int64
		for w := 0; w < connections; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					i := int(next.Add(1) - 1)
					if i >= maxRequests {
						return
					}
					service, _ := g.send(i)
					record(sample{latency: service, service: service})
					count.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	latencies := make([]float64, len(samples))
	services := make([]float64, len(samples))
	for i, s := range samples {
		latencies[i] = float64(s.latency) / float64(time.Millisecond)
		services[i] = float64(s.service) / float64(time.Millisecond)
	}
	return result{
		Mode:          mode,
		Rate:          rate,
		Connections:   connections,
		DurationS:     elapsed,
		Requests:      count.Load(),
		Errors:        g.errors.Load(),
		Non200:        g.non200.Load(),
		AchievedRPS:   float64(count.Load()) / elapsed,
		LatencyMs:     summary(latencies),
		ServiceMs:     summary(services),
		FirstErrorMsg: g.firstErr,
	}
}

func summary(values []float64) map[string]float64 {
	out := map[string]float64{}
	if len(values) == 0 {
		return out
	}
	sort.Float64s(values)
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	pick := func(q float64) float64 {
		k := int(math.Ceil(q/100*float64(len(values)))) - 1
		if k < 0 {
			k = 0
		}
		if k >= len(values) {
			k = len(values) - 1
		}
		return values[k]
	}
	out["mean"] = sum / float64(len(values))
	out["p50"] = pick(50)
	out["p90"] = pick(90)
	out["p99"] = pick(99)
	out["p999"] = pick(99.9)
	out["max"] = values[len(values)-1]
	return out
}
