package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BullMQ runs as Node processes (bench/bullmq/bench.mjs): one client
// process per system for the producers, one worker process per consumer.
// Both talk to BullMQ's own redis-server, measured through the same INFO
// accounting as the others.

// minNode is the oldest Node major BullMQ's bench runs on here.
const minNode = 20

// setupBullMQ checks Node and installs the pinned BullMQ (package-lock.json)
// into bench/bullmq/node_modules when it is missing. It returns the
// directory of bench.mjs.
func setupBullMQ(ctx context.Context, root string, logf func(string, ...any)) (string, error) {
	dir := filepath.Join(root, "bench", "bullmq")
	need := fmt.Sprintf("BullMQ's bench needs Node.js %d or newer and npm on the PATH (Debian's nodejs 18 is too old: install Node %d.x, e.g. from NodeSource), or run with -no-bullmq", minNode, minNode)
	b, err := exec.CommandContext(ctx, "node", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("node --version: %v; %s", err, need)
	}
	v := strings.TrimSpace(string(b))
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(v, "v"), ".", 2)[0])
	if major < minNode {
		return "", fmt.Errorf("node is %s; %s", v, need)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "bullmq", "package.json")); err == nil {
		return dir, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("npm not found; %s", need)
	}
	logf("installing BullMQ into %s (npm ci, versions from package-lock.json)", dir)
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir, nil
}

// nodeProc is one Node process of the BullMQ bench.
type nodeProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	done  chan struct{}
}

func startNode(dir string, args ...string) (*nodeProc, error) {
	cmd := exec.Command("node", append([]string{filepath.Join(dir, "bench.mjs")}, args...)...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &nodeProc{cmd: cmd, stdin: in, out: sc, done: make(chan struct{})}, nil
}

func (p *nodeProc) pid() int { return p.cmd.Process.Pid }

// stop closes its stdin (the program's signal to close BullMQ and exit)
// and kills it if it has not exited after grace.
func (p *nodeProc) stop(grace time.Duration) {
	p.stdin.Close()
	ended := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-ended
	}
}

type bqSystem struct {
	e       *env
	dir     string
	version string
	prefix  string
	cli     *nodeProc
	mu      sync.Mutex
	nextID  int64
	waiting map[int64]chan bqReply
	workers []*nodeProc // running consumers
}

type bqReply struct {
	ID  int64  `json:"id"`
	OK  int    `json:"ok"`
	Err string `json:"err"`
}

func newBQ(e *env, dir string) (*bqSystem, error) {
	b := &bqSystem{e: e, dir: dir, waiting: map[int64]chan bqReply{}}
	cli, err := startNode(dir, "client", e.bqRed.Addr)
	if err != nil {
		return nil, err
	}
	if !cli.out.Scan() {
		cli.stop(time.Second)
		return nil, errors.New("bullmq client: no ready line")
	}
	var hello struct {
		Version, Node string
	}
	_ = json.Unmarshal(cli.out.Bytes(), &hello)
	b.version = hello.Version + " (Node " + hello.Node + ")"
	b.cli = cli
	go b.readReplies()
	return b, nil
}

func (b *bqSystem) readReplies() {
	for b.cli.out.Scan() {
		var r bqReply
		if json.Unmarshal(b.cli.out.Bytes(), &r) != nil {
			continue
		}
		b.mu.Lock()
		ch := b.waiting[r.ID]
		delete(b.waiting, r.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	b.mu.Lock()
	for id, ch := range b.waiting {
		ch <- bqReply{ID: id, Err: "bullmq client process ended"}
		delete(b.waiting, id)
	}
	b.mu.Unlock()
}

func (b *bqSystem) name() string       { return "bullmq" }
func (b *bqSystem) setPrefix(p string) { b.prefix = p }

// call sends one add request and waits for its answer.
func (b *bqSystem) call(ctx context.Context, ts []btask, bulk bool) (int, error) {
	req := struct {
		ID      int64   `json:"id"`
		Op      string  `json:"op"`
		Idx     []int   `json:"idx"`
		Due     []int64 `json:"due"`
		Payload int     `json:"payload"`
		Bulk    bool    `json:"bulk"`
	}{Op: "add", Bulk: bulk, Idx: make([]int, len(ts)), Due: make([]int64, len(ts))}
	for i, t := range ts {
		req.Idx[i], req.Due[i], req.Payload = t.idx, t.due.UnixMilli(), t.payload
	}
	ch := make(chan bqReply, 1)
	b.mu.Lock()
	b.nextID++
	req.ID = b.nextID
	b.waiting[req.ID] = ch
	line, _ := json.Marshal(req)
	_, err := b.cli.stdin.Write(append(line, '\n'))
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case r := <-ch:
		if r.Err != "" {
			return r.OK, errors.New("bullmq: " + r.Err)
		}
		return r.OK, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// enqueue adds ts with one Queue.addBulk call (BullMQ's batch API).
func (b *bqSystem) enqueue(ctx context.Context, ts []btask) (int, error) {
	return b.call(ctx, ts, true)
}

// enqueueEach adds ts with one Queue.add call after the other.
func (b *bqSystem) enqueueEach(ctx context.Context, ts []btask) (int, error) {
	return b.call(ctx, ts, false)
}

func (b *bqSystem) startConsumer(ctx context.Context, rec *recorder) (func(), error) {
	w, err := startNode(b.dir, "worker", b.e.bqRed.Addr, strconv.Itoa(concurrency))
	if err != nil {
		return nil, err
	}
	if !w.out.Scan() || w.out.Text() != "ready" {
		w.stop(time.Second)
		return nil, errors.New("bullmq worker: no ready line")
	}
	go func() {
		defer close(w.done)
		for w.out.Scan() {
			f := strings.Fields(w.out.Text())
			if len(f) != 3 {
				continue
			}
			i, _ := strconv.Atoi(f[0])
			due, _ := strconv.ParseInt(f[1], 10, 64)
			start, _ := strconv.ParseFloat(f[2], 64)
			rec.recordAt(i, due*1e6, int64(start*1e6))
		}
	}()
	b.mu.Lock()
	b.workers = append(b.workers, w)
	b.mu.Unlock()
	return func() {
		w.stop(10 * time.Second)
		<-w.done
		b.mu.Lock()
		for i, x := range b.workers {
			if x == w {
				b.workers = append(b.workers[:i], b.workers[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
	}, nil
}

func (b *bqSystem) consumerLateness() (float64, float64, bool) { return 0, 0, false }

// snap counts the Node processes' CPU beside Redis's (as the schedulers'
// for Hourglass); their commands have no hook, so top-level calls are
// not known for BullMQ.
func (b *bqSystem) snap(ctx context.Context) (rstats, error) {
	pids := []int{b.cli.pid()}
	b.mu.Lock()
	for _, w := range b.workers {
		pids = append(pids, w.pid())
	}
	b.mu.Unlock()
	return snapshot(ctx, b.e.bqAdmin, b.e.bqAdminN, nil, pids)
}

func (b *bqSystem) clear(ctx context.Context) error { return b.e.bqAdmin.FlushAll(ctx).Err() }

func (b *bqSystem) close() { b.cli.stop(5 * time.Second) }
