// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/devenv"
	"github.com/fulfiller-sh/fulfiller/internal/testenv/nodecheck"
)

// userDataAudit keeps every user data the controller renders while the suite runs (each
// claim's user data Secret, of every family's scenario), so that the real tools read them
// all once the scenarios are done (nodecheck.Tools.Check).
type userDataAudit struct {
	mu   sync.Mutex
	data map[string][]byte // by claim
	stop context.CancelFunc
}

// startUserDataAudit watches the user data Secrets of the environment's namespace.
func startUserDataAudit(dir string) (*userDataAudit, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", devenv.Layout{Dir: dir}.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	a := &userDataAudit{data: map[string][]byte{}, stop: stop}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(devenv.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app.kubernetes.io/component=user-data" }))
	informer := factory.Core().V1().Secrets().Informer()
	keep := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok && len(s.Data[classconfig.UserDataKey]) > 0 {
			a.mu.Lock()
			a.data[s.Name] = s.Data[classconfig.UserDataKey]
			a.mu.Unlock()
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: keep, UpdateFunc: func(_, obj any) { keep(obj) }}); err != nil {
		stop()
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		stop()
		return nil, errors.New("the user data audit's informer did not sync")
	}
	return a, nil
}

// check stops the audit and lets the real cloud-init, kubeadm and shellcheck read every user
// data it kept.
func (a *userDataAudit) check() error {
	a.stop()
	tools, err := nodecheck.Find()
	if err != nil {
		return err
	}
	a.mu.Lock()
	names := make([]string, 0, len(a.data))
	for name := range a.data {
		names = append(names, name)
	}
	a.mu.Unlock()
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	var errs []error
	for _, name := range names {
		if err := tools.Check(ctx, "", a.data[name]); err != nil {
			errs = append(errs, fmt.Errorf("user data Secret %s: %w", name, err))
		}
	}
	fmt.Fprintf(os.Stderr, "e2e: cloud-init, kubeadm and shellcheck read the %d user data the controller rendered in %s\n",
		len(names), time.Since(start).Round(time.Millisecond))
	// A whole run renders user data in every family's scenario; one scenario may render none.
	if run := flag.Lookup("test.run"); len(names) == 0 && (run == nil || run.Value.String() == "") {
		errs = append(errs, errors.New("the controller rendered no user data"))
	}
	return errors.Join(errs...)
}
