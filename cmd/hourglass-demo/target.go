package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"
)

// demoPayload picks a task's fate: most succeed at once, about 15% fail
// once or twice before succeeding, about 2% always fail (and end in the
// dead-letter queue after their retries).
func demoPayload() []byte {
	fail := 0
	switch r := rand.IntN(100); {
	case r < 2:
		fail = 1000
	case r < 10:
		fail = 1
	case r < 17:
		fail = 2
	}
	b, _ := json.Marshal(map[string]int{"fail": fail})
	return b
}

// target is the HTTP endpoint the demo's workers deliver to.
type target struct {
	url string
	srv *http.Server
	l   net.Listener
}

func startTarget() (*target, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &target{url: "http://" + l.Addr().String() + "/task", l: l}
	t.srv = &http.Server{Handler: http.HandlerFunc(handle), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = t.srv.Serve(l) }() // ends when close shuts the server down
	return t, nil
}

// handle fails the first "fail" attempts of a task with 500, then answers
// 204.
func handle(w http.ResponseWriter, r *http.Request) {
	var p struct{ Fail int }
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, "bad payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	attempt, _ := strconv.Atoi(r.Header.Get("Hourglass-Attempt"))
	if attempt <= p.Fail {
		http.Error(w, fmt.Sprintf("demo failure on attempt %d", attempt), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (t *target) close() { _ = t.srv.Close() }
