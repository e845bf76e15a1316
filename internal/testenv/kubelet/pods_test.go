package kubelet

import "testing"

func TestPathMapRewrite(t *testing.T) {
	p := pathMap{{from: "/run/request", to: "/tmp/p/volumes/request"}, {from: "/work", to: "/tmp/p/volumes/work"}}
	for in, want := range map[string]string{
		"/run/request/request.json": "/tmp/p/volumes/request/request.json",
		"/work":                     "/tmp/p/volumes/work",
		"--work-dir=/work/x":        "--work-dir=/tmp/p/volumes/work/x",
		"/workspace":                "/workspace",
		"/run/requests":             "/run/requests",
		"KEY=/work":                 "KEY=/work",
		"plain":                     "plain",
	} {
		if got := p.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}
