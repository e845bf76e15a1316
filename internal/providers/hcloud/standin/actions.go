// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"net/http"
	"strconv"
	"time"
)

// Action states.
const (
	actionRunning = "running"
	actionSuccess = "success"
	actionError   = "error"
)

// action is an asynchronous operation (docs.hetzner.cloud "Actions"): running, with a
// progress that grows with time, until it ends in success or error.
type action struct {
	id        int64
	command   string
	resources []jsonResourceRef
	started   time.Time
	// duration is how long it is expected to run; progress is the elapsed share of it.
	duration time.Duration
	finished time.Time
	status   string
	err      *jsonActionError
}

func (a *action) json(now time.Time) jsonAction {
	j := jsonAction{ID: a.id, Command: a.command, Status: a.status, Started: apiTime(a.started),
		Resources: a.resources, Error: a.err}
	if a.status == actionRunning {
		j.Progress = 0
		if a.duration > 0 {
			j.Progress = min(99, int(now.Sub(a.started)*100/a.duration))
		}
	} else {
		j.Progress = 100
		f := apiTime(a.finished)
		j.Finished = &f
	}
	return j
}

// newAction records a running action on the resources. Callers hold s.mu.
func (s *StandIn) newAction(command string, duration time.Duration, resources ...jsonResourceRef) *action {
	a := &action{id: s.nextID("action"), command: command, resources: resources, started: time.Now(),
		duration: duration, status: actionRunning}
	if a.resources == nil {
		a.resources = []jsonResourceRef{}
	}
	s.actions[a.id] = a
	return a
}

// finish ends a running action. Callers hold s.mu.
func (a *action) finish(err *jsonActionError) {
	a.finished = time.Now()
	a.status = actionSuccess
	if err != nil {
		a.status, a.err = actionError, err
	}
}

// runningOn reports whether an action runs on the resource (it is locked then).
func (s *StandIn) runningOn(kind string, id int64) bool {
	for _, a := range s.actions {
		if a.status != actionRunning {
			continue
		}
		for _, r := range a.resources {
			if r.Type == kind && r.ID == id {
				return true
			}
		}
	}
	return false
}

// after runs fn after d in the background, unless the stand-in closes first; it reports
// whether fn ran.
func (s *StandIn) after(d time.Duration, fn func()) {
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		if d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-s.closing:
				return
			case <-t.C:
			}
		}
		select {
		case <-s.closing:
			return
		default:
		}
		fn()
	}()
}

// GET /actions?id=...: the listed actions (listing all actions was removed from the API).
func (s *StandIn) listActions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if len(q["id"]) == 0 {
		writeError(w, invalidInput("id", "is required"))
		return
	}
	s.mu.Lock()
	now := time.Now()
	var list []*action
	for _, v := range q["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			s.mu.Unlock()
			writeError(w, invalidInput("id", "must be an integer"))
			return
		}
		if a, ok := s.actions[id]; ok {
			list = append(list, a)
		}
	}
	statuses := q["status"]
	var filtered []jsonAction
	for _, a := range list {
		if len(statuses) == 0 || contains(statuses, a.status) {
			filtered = append(filtered, a.json(now))
		}
	}
	s.mu.Unlock()
	if e := sortItems(r, filtered, func(a jsonAction) int64 { return a.ID }, map[string]func(a, b jsonAction) int{
		"command":  func(a, b jsonAction) int { return compare(a.Command, b.Command) },
		"status":   func(a, b jsonAction) int { return compare(a.Status, b.Status) },
		"progress": func(a, b jsonAction) int { return compare(a.Progress, b.Progress) },
		"started":  func(a, b jsonAction) int { return compareTime(time.Time(a.Started), time.Time(b.Started)) },
	}); e != nil {
		writeError(w, e)
		return
	}
	page, meta, e := paginate(w, r, filtered)
	if e != nil {
		writeError(w, e)
		return
	}
	if page == nil {
		page = []jsonAction{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"actions": page, "meta": meta})
}

// GET /actions/{id}
func (s *StandIn) getAction(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	a, ok := s.actions[id]
	var j jsonAction
	if ok {
		j = a.json(time.Now())
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, notFound("action", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"action": j})
}
