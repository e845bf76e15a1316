// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// containerLog is a container's log file; done is closed when the container has exited.
type containerLog struct {
	path string
	done chan struct{}
}

// serveLog serves GET /containerLogs/{namespace}/{pod}/{container} as the kubelet does, with
// the tailLines, limitBytes and follow parameters (timestamps and previous are ignored: logs
// carry no CRI timestamps and containers never restart).
func (k *Kubelet) serveLog(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	cl, ok := k.logs[logKey(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"))]
	k.mu.Unlock()
	if !ok {
		http.Error(w, "container not found", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	f, err := os.Open(cl.path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer func() { _ = f.Close() }()
	var out io.Writer = w
	if n, err := strconv.Atoi(q.Get("limitBytes")); err == nil && n > 0 {
		out = &limitWriter{w: w, left: n}
	}
	w.Header().Set("Content-Type", "text/plain")
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil && n >= 0 {
		data, err := io.ReadAll(f)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		lines := bytes.SplitAfter(data, []byte("\n"))
		if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		if _, err := out.Write(bytes.Join(lines, nil)); err != nil {
			return
		}
	} else if _, err := io.Copy(out, f); err != nil {
		return
	}
	if q.Get("follow") != "true" {
		return
	}
	flusher, _ := w.(http.Flusher)
	reader := bufio.NewReader(f)
	for {
		if flusher != nil {
			flusher.Flush()
		}
		_, err := io.Copy(out, reader)
		if err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-cl.done:
			_, _ = io.Copy(out, reader) // what it wrote last
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var errLimit = errors.New("limitBytes reached")

type limitWriter struct {
	w    io.Writer
	left int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errLimit
	}
	if len(p) > l.left {
		n, _ := l.w.Write(p[:l.left])
		l.left = 0
		return n, errLimit
	}
	n, err := l.w.Write(p)
	l.left -= n
	return n, err
}
