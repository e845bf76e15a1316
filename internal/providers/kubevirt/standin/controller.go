// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Scheme has the types the stand-in reads and writes: Kubernetes', KubeVirt's core/v1 and
// CDI's core/v1beta1.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, virtv1.AddToScheme, cdiv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building the kubevirt scheme: %w", err)
		}
	}
	return s, nil
}

// Controller is the simulated virt controller (and CDI) of an infra cluster whose API server
// holds KubeVirt's CRDs (package crds).
type Controller struct {
	mgr manager.Manager
}

// New builds the controller; Run starts it.
func New(cfg *rest.Config, conf Config) (*Controller, error) {
	conf = conf.withDefaults()
	if err := conf.validate(); err != nil {
		return nil, fmt.Errorf("invalid kubevirt stand-in config: %w", err)
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	opts := manager.Options{
		Scheme:                 scheme,
		Logger:                 conf.Log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Several stand-ins may run in one process (tests); controller names are otherwise
		// unique per process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if conf.Namespace != "" {
		opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{conf.Namespace: {}}}
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("building the kubevirt stand-in: %w", err)
	}
	// Secrets and storage classes are read straight from the API server: no informer over
	// every Secret.
	reader := mgr.GetAPIReader()
	readThrough := &splitClient{Client: mgr.GetClient(), reader: reader}

	vms := &vmController{client: mgr.GetClient(), recorder: coreEvents(mgr, "virtualmachine-controller"), cfg: conf, rnd: defaultRand}
	if err := builder.ControllerManagedBy(mgr).Named("kubevirt-standin-vm").
		For(&virtv1.VirtualMachine{}).
		Owns(&virtv1.VirtualMachineInstance{}).
		Owns(&cdiv1.DataVolume{}).
		Complete(vms); err != nil {
		return nil, fmt.Errorf("building the vm controller: %w", err)
	}
	vmis := &vmiController{client: readThrough, recorder: coreEvents(mgr, "virtualmachineinstance-controller"), cfg: conf, launchers: map[types.UID]*launcher{}}
	if err := builder.ControllerManagedBy(mgr).Named("kubevirt-standin-vmi").
		For(&virtv1.VirtualMachineInstance{}).
		Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(vmisOfDataVolume(mgr.GetClient()))).
		Complete(vmis); err != nil {
		return nil, fmt.Errorf("building the vmi controller: %w", err)
	}
	dvs := &dataVolumeController{client: readThrough, recorder: coreEvents(mgr, "datavolume-controller"), cfg: conf}
	if err := builder.ControllerManagedBy(mgr).Named("kubevirt-standin-cdi").
		For(&cdiv1.DataVolume{}).
		Complete(dvs); err != nil {
		return nil, fmt.Errorf("building the datavolume controller: %w", err)
	}
	return &Controller{mgr: mgr}, nil
}

// Run runs the controller until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the kubevirt stand-in: %w", err)
	}
	return nil
}

// vmisOfDataVolume enqueues the VMIs of a DataVolume's namespace that use it.
func vmisOfDataVolume(c client.Client) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := &virtv1.VirtualMachineInstanceList{}
		if err := c.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for _, vmi := range list.Items {
			for _, v := range vmi.Spec.Volumes {
				if v.DataVolume != nil && v.DataVolume.Name == obj.GetName() || v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == obj.GetName() {
					reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name}})
					break
				}
			}
		}
		return reqs
	}
}

// splitClient reads Secrets and StorageClasses from the API server and everything else from
// the cache.
type splitClient struct {
	client.Client
	reader client.Reader
}

func (s *splitClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if uncached(obj) {
		return s.reader.Get(ctx, key, obj, opts...)
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

func (s *splitClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if uncached(list) {
		return s.reader.List(ctx, list, opts...)
	}
	return s.Client.List(ctx, list, opts...)
}

func uncached(obj runtime.Object) bool {
	switch obj.(type) {
	case *corev1.Secret, *corev1.SecretList, *storagev1.StorageClass, *storagev1.StorageClassList:
		return true
	}
	return false
}

// coreEvents records core/v1 Events as component, the way KubeVirt's virt-controller and CDI
// record theirs (record.EventRecorder, not the events.k8s.io recorder).
func coreEvents(mgr manager.Manager, component string) record.EventRecorder {
	return mgr.GetEventRecorderFor(component) //nolint:staticcheck // SA1019: the old events API is the one KubeVirt's controllers use
}
