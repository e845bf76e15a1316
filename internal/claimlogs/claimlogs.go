// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

// Package claimlogs is `fulfiller logs CLAIM`: it prints the log of a claim's tofu run — the
// runner's own log while it lasts (a runner Job's pod log, a local run's file), else the tail
// that the claim's Fulfillment kept of a failed run (status.runs[].logTail).
package claimlogs

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// DefaultNamespace is where the runner Jobs are unless --namespace says otherwise: the
// namespace docs/install.md installs the chart into.
const DefaultNamespace = "fulfiller"

// Options say which log to print and how.
type Options struct {
	// Kube reads the claim's Fulfillment; Clientset the runner Jobs' pods and their logs.
	Kube      client.Reader
	Clientset kubernetes.Interface
	// Namespace holds the runner Jobs.
	Namespace string
	// Run names one of the claim's runs; empty: its current (last) run.
	Run string
	// Follow streams a runner's log while it runs.
	Follow bool
	// JSON prints the runner's log as it is, tofu's `-json` messages, instead of rendering
	// them (tfrunner.RenderLog). A kept tail is rendered already.
	JSON bool
	// Out gets the log; Notes say where it came from.
	Out, Notes io.Writer
}

// ErrNoLog: the run's log is gone and its record keeps no tail (only failed runs keep one).
var ErrNoLog = errors.New("no log")

// Print prints the log of a run of the claim: its runner's log while it lasts, else the tail
// its record kept.
func Print(ctx context.Context, claim string, o Options) error {
	f := &v1alpha1.Fulfillment{}
	if err := o.Kube.Get(ctx, client.ObjectKey{Name: claim}, f); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s has no Fulfillment", claim)
		}
		return fmt.Errorf("reading the Fulfillment of %s: %w", claim, err)
	}
	run, err := pickRun(f, o.Run)
	if err != nil {
		return err
	}
	printed, err := printRunnerLog(ctx, run, o)
	if printed || err != nil {
		return err
	}
	if run.LogTail == "" {
		return fmt.Errorf("run %s of %s: its runner's log is gone and its record keeps no tail (only failed runs keep one): %w", run.Name, claim, ErrNoLog)
	}
	fmt.Fprintf(o.Notes, "the runner's log of %s is gone; the tail its record kept (%s, %s):\n", run.Name, run.Phase, cmp.Or(run.ErrorClass, "no class"))
	_, err = io.WriteString(o.Out, strings.TrimRight(run.LogTail, "\n")+"\n")
	return err
}

// pickRun is the named run of the claim, or its last one.
func pickRun(f *v1alpha1.Fulfillment, name string) (*v1alpha1.Run, error) {
	runs := f.Status.Runs
	if len(runs) == 0 {
		return nil, fmt.Errorf("claim %s has no runs yet (%s: %s)", f.Name, f.Status.Phase, f.Status.Message)
	}
	if name == "" {
		return &runs[len(runs)-1], nil
	}
	var names []string
	for i := range runs {
		if runs[i].Name == name {
			return &runs[i], nil
		}
		names = append(names, runs[i].Name)
	}
	return nil, fmt.Errorf("claim %s has no run %s (its runs: %s)", f.Name, name, strings.Join(names, ", "))
}

// printRunnerLog prints the run's log from its runner, and reports whether there was one: a
// runner Job's newest pod's log, or a local run's log file.
func printRunnerLog(ctx context.Context, run *v1alpha1.Run, o Options) (bool, error) {
	if job, ok := strings.CutPrefix(run.Log, "job/"); ok {
		return printPodLog(ctx, job, o)
	}
	if run.Log == "" {
		return false, nil
	}
	file, err := os.Open(run.Log)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the log of run %s: %w", run.Name, err)
	}
	defer func() { _ = file.Close() }()
	return true, copyLog(o.Out, file, o.JSON)
}

func printPodLog(ctx context.Context, job string, o Options) (bool, error) {
	pods, err := o.Clientset.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil {
		return false, fmt.Errorf("listing the pods of Job %s/%s: %w", o.Namespace, job, err)
	}
	if len(pods.Items) == 0 {
		return false, nil
	}
	sort.Slice(pods.Items, func(i, j int) bool {
		return pods.Items[j].CreationTimestamp.Before(&pods.Items[i].CreationTimestamp)
	})
	pod := pods.Items[0].Name
	stream, err := o.Clientset.CoreV1().Pods(o.Namespace).GetLogs(pod, &corev1.PodLogOptions{Follow: o.Follow}).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the log of pod %s/%s: %w", o.Namespace, pod, err)
	}
	defer func() { _ = stream.Close() }()
	return true, copyLog(o.Out, stream, o.JSON)
}

// copyLog copies a runner's log line by line, rendered unless raw.
func copyLog(out io.Writer, in io.Reader, raw bool) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		text := string(line) + "\n"
		if !raw {
			text = tfrunner.RenderLog(line)
		}
		if _, err := io.WriteString(out, text); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Main is the logs command: `logs [flags] CLAIM`.
func Main(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("logs", flag.ContinueOnError)
	flags.SetOutput(stderr)
	kubeconfig := flags.String("kubeconfig", "", "the kubeconfig to use (default: $KUBECONFIG, ~/.kube/config)")
	namespace := flags.String("namespace", DefaultNamespace, "the namespace of the runner Jobs (the fulfiller's)")
	flags.StringVar(namespace, "n", DefaultNamespace, "short for --namespace")
	run := flags.String("run", "", "the run to print (default: the claim's last run)")
	follow := flags.Bool("f", false, "follow a running runner's log")
	raw := flags.Bool("json", false, "print tofu's -json messages as the runner wrote them")
	usage := func() int {
		fmt.Fprintln(stderr, "usage: fulfiller logs [--kubeconfig PATH] [-n NAMESPACE] [--run NAME] [-f] [--json] CLAIM")
		return 2
	}
	// Flags may come before and after the claim's name.
	if err := flags.Parse(args); err != nil {
		return usage()
	}
	rest := flags.Args()
	if len(rest) == 0 {
		return usage()
	}
	claim := rest[0]
	if err := flags.Parse(rest[1:]); err != nil || flags.NArg() != 0 {
		return usage()
	}
	kube, clientset, err := clients(*kubeconfig)
	if err != nil {
		fmt.Fprintln(stderr, "fulfiller logs:", err)
		return 1
	}
	err = Print(context.Background(), claim, Options{Kube: kube, Clientset: clientset, Namespace: *namespace, Run: *run,
		Follow: *follow, JSON: *raw, Out: stdout, Notes: stderr})
	if err != nil {
		fmt.Fprintln(stderr, "fulfiller logs:", err)
		return 1
	}
	return 0
}

func clients(kubeconfig string) (client.Reader, kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("building the client: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building the client: %w", err)
	}
	return kube, clientset, nil
}
