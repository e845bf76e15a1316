// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"
)

// Guest is how a guest booted from an image behaves.
type Guest string

const (
	// GuestBoots runs cloud-init and joins with the token in its user data: a stock image,
	// on which the user data installs the node software first.
	GuestBoots Guest = "Boots"
	// GuestBootsNode is GuestBoots from an image that has the node software (a containerDisk
	// built with images/' install script).
	GuestBootsNode Guest = "BootsNode"
	// GuestCrashes makes the VM's launcher fail before the domain runs (a broken disk image,
	// a firmware the hypervisor refuses): the VMI fails without ever running, and a VM that
	// keeps restarting it shows CrashLoopBackOff.
	GuestCrashes Guest = "Crashes"
	// GuestNeverJoins boots and runs, but never joins (no cloud-init, no route to the API
	// server).
	GuestNeverJoins Guest = "NeverJoins"
)

// Node is one node of the simulated infra cluster: what the virt-launcher pods are scheduled
// onto. It exists only in the stand-in; no Node object is created for it.
type Node struct {
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// Allocatable is what the node offers: cpu, memory and device plugin resources (a GPU's
	// deviceName, e.g. nvidia.com/GA102GL_A10).
	Allocatable corev1.ResourceList
	// Unschedulable is a cordoned node.
	Unschedulable bool
}

// Timings are how long each simulated step takes. Zero values take the defaults.
type Timings struct {
	// Schedule is from a VMI's creation to its launcher pod being scheduled (default 100ms).
	Schedule time.Duration
	// Start is from scheduling to the launcher pod being ready: image pulls, the launcher
	// starting (default 300ms). The VMI is then Scheduled.
	Start time.Duration
	// Boot is from Scheduled to the domain running (default 200ms). The VMI is then Running
	// and the guest powered on.
	Boot time.Duration
	// Import is how long a DataVolume takes to import its disk once bound (default 500ms).
	Import time.Duration
	// ImagePullBackOff is the kubelet's back-off between two pulls of an image that does not
	// exist (default 2s; the kubelet's starts at 10s). Each failed pull shows ErrImagePull,
	// then ImagePullBackOff until the next one.
	ImagePullBackOff time.Duration
	// CrashLoopBackOff is the base of the VM's start-failure back-off: KubeVirt waits
	// base × failures² (plus up to half of that at random), at most MaxCrashLoopBackOff
	// (KubeVirt: 10s and 300s; defaults here 1s and 30s).
	CrashLoopBackOff    time.Duration
	MaxCrashLoopBackOff time.Duration
	// Retry is how often an unschedulable VMI, or a DataVolume waiting for its storage class,
	// is tried again (default 1s).
	Retry time.Duration
}

func (t Timings) withDefaults() Timings {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Schedule, 100*time.Millisecond)
	def(&t.Start, 300*time.Millisecond)
	def(&t.Boot, 200*time.Millisecond)
	def(&t.Import, 500*time.Millisecond)
	def(&t.ImagePullBackOff, 2*time.Second)
	def(&t.CrashLoopBackOff, time.Second)
	def(&t.MaxCrashLoopBackOff, 30*time.Second)
	def(&t.Retry, time.Second)
	return t
}

// Config is the simulated infra cluster and its KubeVirt installation.
type Config struct {
	// Namespace limits the controller to VMs, VMIs and DataVolumes of one namespace; empty
	// watches every namespace.
	Namespace string
	// Nodes are the infra cluster's nodes. A VMI whose launcher pod fits on none of them is
	// unschedulable, as with the real scheduler.
	Nodes []Node
	// Images says how a guest booted from each image behaves: containerDisk images, and the
	// registry source (docker://<image>) of DataVolumes. An image that is not listed does not
	// exist: pulling it fails. With AnyImage, unlisted images exist and boot.
	Images   map[string]Guest
	AnyImage bool
	// CPUAllocationRatio is KubeVirt's developerConfiguration.cpuAllocationRatio: a launcher
	// pod requests vCPUs/ratio cores unless the VMI asks for dedicated CPUs or sets its own
	// request (default 10, as in KubeVirt).
	CPUAllocationRatio int
	// MemoryOverhead is added to each launcher pod's memory request (KubeVirt computes one of
	// a few hundred MiB from the VMI's devices; default 0).
	MemoryOverhead resource.Quantity
	// GuestGPUResource is the extended resource a guest's Node reports for the GPUs passed
	// through to it (default nvidia.com/gpu, what the NVIDIA device plugin registers).
	GuestGPUResource corev1.ResourceName
	// PodCIDR is where VMI interface addresses are taken from (status only; default
	// 10.244.0.0/16).
	PodCIDR netip.Prefix
	// Machines powers guests on and off. Required.
	Machines Machines
	Timings  Timings
	// Clock is the controller's clock (default the real one).
	Clock clock.Clock
	// Log receives the controller's logs (default discarded).
	Log logr.Logger
}

func (c Config) withDefaults() Config {
	c.Timings = c.Timings.withDefaults()
	if c.CPUAllocationRatio <= 0 {
		c.CPUAllocationRatio = 10
	}
	if c.GuestGPUResource == "" {
		c.GuestGPUResource = "nvidia.com/gpu"
	}
	if !c.PodCIDR.IsValid() {
		c.PodCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Log.GetSink() == nil {
		c.Log = logr.Discard()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Machines == nil {
		errs = append(errs, errors.New("no machines hook"))
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if n.Name == "" || seen[n.Name] {
			errs = append(errs, fmt.Errorf("infra node name %q is empty or repeated", n.Name))
		}
		seen[n.Name] = true
	}
	for image, g := range c.Images {
		if g != GuestBoots && g != GuestBootsNode && g != GuestCrashes && g != GuestNeverJoins {
			errs = append(errs, fmt.Errorf("image %s: unknown guest behaviour %q", image, g))
		}
	}
	return errors.Join(errs...)
}

// guest says whether image exists and how its guest behaves.
func (c Config) guest(image string) (Guest, bool) {
	if g, ok := c.Images[image]; ok {
		return g, true
	}
	return GuestBoots, c.AnyImage
}
