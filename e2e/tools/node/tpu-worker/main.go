// Command tpu-worker is the test workload of the real node (`e2e/cluster up --real-node`): a
// program that behaves like a JAX trainer at its edges, without a TPU. It
//
//   - reads what the operator and the TPU device plugin give a worker: TPU_WORKER_ID,
//     TPU_WORKER_HOSTNAMES, MEGASCALE_COORDINATOR_ADDRESS / MEGASCALE_NUM_SLICES /
//     MEGASCALE_SLICE_ID, TPUJOB_ATTEMPT, TPUJOB_CHECKPOINT_PATH, TPU_VISIBLE_CHIPS, and counts
//     the /dev/accel<N> device nodes it was given;
//   - resolves every peer name (and the coordinator) through the cluster's DNS, as the runtime
//     does before its first collective, and exits 3 when they do not resolve in time;
//   - resumes from the checkpoint in TPUJOB_CHECKPOINT_PATH, then counts steps, saving a
//     checkpoint every WORKER_CHECKPOINT_EVERY steps;
//   - on SIGTERM saves a checkpoint, leaves a marker and exits (WORKER_ON_SIGTERM=checkpoint, the
//     default), or logs it and keeps going (WORKER_ON_SIGTERM=ignore) until the kubelet kills it;
//   - after WORKER_STEPS steps (0: never) exits with the code WORKER_EXIT_CODES gives its run:
//     a comma-separated list, the first code for this worker's first run, the second for its
//     second run, and so on, the last repeating (runs are counted in the checkpoint directory).
//
// Everything it does is logged to stdout (kubectl logs) and appended as JSON lines to
// <checkpoint>/events.jsonl, where a test on the host reads it through the hostPath volume:
// {"time_ms":..,"pod":..,"worker":"slice-0-worker-1","attempt":2,"event":"first-step",...}.
//
// Other settings: WORKER_STEP_MS (200), WORKER_DNS_TIMEOUT_SECONDS (60),
// WORKER_CHECKPOINT_EVERY (5).
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type worker struct {
	name     string // slice-<s>-worker-<w>
	pod      string
	attempt  int
	dir      string // the checkpoint directory ("" without TPUJOB_CHECKPOINT_PATH)
	step     int
	resumed  int
	eventLog *os.File
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tpu-worker: %s=%q is not an integer\n", name, v)
		os.Exit(2)
	}
	return n
}

// event logs one line to stdout and appends it to the event log.
func (w *worker) event(kind string, fields map[string]any) {
	now := time.Now()
	line := map[string]any{"time_ms": now.UnixMilli(), "pod": w.pod, "worker": w.name,
		"attempt": w.attempt, "event": kind, "step": w.step}
	for k, v := range fields {
		line[k] = v
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	text := fmt.Sprintf("%s %s event=%s attempt=%d step=%d", now.UTC().Format("15:04:05.000"), w.name, kind, w.attempt, w.step)
	for _, k := range keys {
		text += fmt.Sprintf(" %s=%v", k, fields[k])
	}
	fmt.Println(text)
	if w.eventLog != nil {
		data, _ := json.Marshal(line)
		_, _ = w.eventLog.Write(append(data, '\n'))
	}
}

type checkpoint struct {
	Step    int    `json:"step"`
	Attempt int    `json:"attempt"`
	Pod     string `json:"pod"`
	Reason  string `json:"reason"`
	TimeMs  int64  `json:"time_ms"`
}

func (w *worker) checkpointFile() string { return filepath.Join(w.dir, w.name, "checkpoint.json") }

func (w *worker) save(reason string) {
	if w.dir == "" {
		return
	}
	data, _ := json.Marshal(checkpoint{Step: w.step, Attempt: w.attempt, Pod: w.pod, Reason: reason,
		TimeMs: time.Now().UnixMilli()})
	tmp := w.checkpointFile() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err == nil {
		err = os.Rename(tmp, w.checkpointFile())
		if err == nil {
			w.event("checkpoint", map[string]any{"reason": reason})
			return
		}
	}
	w.event("checkpoint-failed", map[string]any{"reason": reason})
}

// runNumber counts this worker's processes in the checkpoint directory (1 for the first).
func (w *worker) runNumber() int {
	if w.dir == "" {
		return 1
	}
	file := filepath.Join(w.dir, w.name, "runs")
	data, _ := os.ReadFile(file)
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	n++
	_ = os.WriteFile(file, []byte(strconv.Itoa(n)), 0o644)
	return n
}

func exitCodeFor(run int) int {
	codes := strings.Split(os.Getenv("WORKER_EXIT_CODES"), ",")
	pick := codes[len(codes)-1]
	if run-1 < len(codes) {
		pick = codes[run-1]
	}
	pick = strings.TrimSpace(pick)
	if pick == "" {
		return 0
	}
	n, err := strconv.Atoi(pick)
	if err != nil || n < 0 || n > 255 {
		fmt.Fprintf(os.Stderr, "tpu-worker: WORKER_EXIT_CODES=%q: want codes 0..255\n", os.Getenv("WORKER_EXIT_CODES"))
		os.Exit(2)
	}
	return n
}

// resolve waits until every name resolves (the peers start in parallel; their DNS records appear
// as their pods get addresses). A SIGTERM meanwhile ends the wait: interrupted is true.
func resolve(names []string, timeout time.Duration, sigterm <-chan os.Signal) (resolved map[string]string, missing []string, interrupted bool) {
	resolved = map[string]string{}
	deadline := time.Now().Add(timeout)
	for {
		missing = nil
		for _, name := range names {
			if _, ok := resolved[name]; ok {
				continue
			}
			if addrs, err := net.LookupHost(name); err == nil && len(addrs) > 0 {
				resolved[name] = addrs[0]
			} else {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			return resolved, missing, false
		}
		select {
		case <-sigterm:
			return resolved, missing, true
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func main() {
	sigterm := make(chan os.Signal, 1)
	signal.Notify(sigterm, syscall.SIGTERM)
	started := time.Now()

	slice := os.Getenv("MEGASCALE_SLICE_ID")
	if slice == "" {
		slice = "0"
	}
	w := &worker{
		name:    fmt.Sprintf("slice-%s-worker-%s", slice, os.Getenv("TPU_WORKER_ID")),
		pod:     os.Getenv("HOSTNAME"),
		attempt: envInt("TPUJOB_ATTEMPT", 0),
		dir:     os.Getenv("TPUJOB_CHECKPOINT_PATH"),
	}
	if w.dir != "" {
		if err := os.MkdirAll(filepath.Join(w.dir, w.name), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "tpu-worker: checkpoint directory: %v\n", err)
			os.Exit(2)
		}
		f, err := os.OpenFile(filepath.Join(w.dir, "events.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			w.eventLog = f
		}
	}
	run := w.runNumber()
	exitCode := exitCodeFor(run)
	steps := envInt("WORKER_STEPS", 0)
	stepEvery := time.Duration(envInt("WORKER_STEP_MS", 200)) * time.Millisecond
	saveEvery := envInt("WORKER_CHECKPOINT_EVERY", 5)
	ignoreTerm := os.Getenv("WORKER_ON_SIGTERM") == "ignore"

	devices, _ := filepath.Glob("/dev/accel[0-9]*")
	hostnames := strings.FieldsFunc(os.Getenv("TPU_WORKER_HOSTNAMES"), func(r rune) bool { return r == ',' })
	w.event("start", map[string]any{"run": run, "exit_code_planned": exitCode,
		"devices": len(devices), "visible_chips": os.Getenv("TPU_VISIBLE_CHIPS"),
		"hostnames": len(hostnames), "slices": os.Getenv("MEGASCALE_NUM_SLICES"),
		"coordinator": os.Getenv("MEGASCALE_COORDINATOR_ADDRESS"), "checkpoint_path": w.dir})

	names := append([]string{}, hostnames...)
	if c := os.Getenv("MEGASCALE_COORDINATOR_ADDRESS"); c != "" {
		names = append(names, c)
	}
	resolved, missing, interrupted := resolve(names, time.Duration(envInt("WORKER_DNS_TIMEOUT_SECONDS", 60))*time.Second, sigterm)
	if interrupted {
		// Stopped before the first step: nothing to save beyond what the last checkpoint holds.
		w.event("sigterm", map[string]any{"before": "peers resolved"})
		w.event("exit", map[string]any{"code": 0, "why": "sigterm"})
		os.Exit(0)
	}
	if len(missing) > 0 {
		w.event("peers-unresolved", map[string]any{"missing": strings.Join(missing, ",")})
		os.Exit(3)
	}
	peers := make([]string, 0, len(resolved))
	for name, addr := range resolved {
		peers = append(peers, name+"="+addr)
	}
	sort.Strings(peers)
	w.event("peers-resolved", map[string]any{"peers": strings.Join(peers, ",")})

	if w.dir != "" {
		if data, err := os.ReadFile(w.checkpointFile()); err == nil {
			var c checkpoint
			if json.Unmarshal(data, &c) == nil {
				w.step, w.resumed = c.Step, c.Step
				w.event("resumed", map[string]any{"from_attempt": c.Attempt, "from_pod": c.Pod,
					"from_reason": c.Reason, "checkpoint": w.checkpointFile()})
			}
		} else {
			w.event("fresh-start", map[string]any{"checkpoint": w.checkpointFile()})
		}
	}

	ticker := time.NewTicker(stepEvery)
	defer ticker.Stop()
	first := true
	for {
		select {
		case <-sigterm:
			if ignoreTerm {
				w.event("sigterm-ignored", nil)
				continue
			}
			w.event("sigterm", nil)
			w.save("sigterm")
			if w.dir != "" {
				marker := filepath.Join(w.dir, w.name, fmt.Sprintf("sigterm-attempt-%d", w.attempt))
				_ = os.WriteFile(marker, []byte(strconv.Itoa(w.step)), 0o644)
			}
			w.event("exit", map[string]any{"code": 0, "why": "sigterm"})
			os.Exit(0)
		case <-ticker.C:
			w.step++
			if first {
				first = false
				w.event("first-step", map[string]any{"since_start_ms": time.Since(started).Milliseconds(),
					"resumed_from": w.resumed})
			} else if ignoreTerm {
				w.event("step", nil) // the grace cut-off is read from the last of these
			}
			if w.dir != "" {
				_ = os.WriteFile(filepath.Join(w.dir, w.name, "step"), []byte(strconv.Itoa(w.step)), 0o644)
			}
			if saveEvery > 0 && w.step%saveEvery == 0 {
				w.save("periodic")
			}
			if steps > 0 && w.step-w.resumed >= steps {
				w.save("exit")
				w.event("exit", map[string]any{"code": exitCode, "why": "steps done"})
				os.Exit(exitCode)
			}
		}
	}
}
