// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package standin

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// CDI's reasons and messages (containerized-data-importer v1.63.1:
// pkg/controller/datavolume/conditions.go, util.go; pkg/controller/common/util.go).
const (
	reasonClaimNotValid       = "ErrClaimNotValid"
	messageNoStorageClass     = "PVC spec is missing accessMode and no storageClass to choose profile"
	reasonPVCBound            = "Bound"
	reasonPVCPending          = "Pending"
	reasonNotFound            = "NotFound"
	reasonTransferRunning     = "TransferRunning"
	reasonImportCompleted     = "Completed"
	reasonImporterError       = "Error"
	annDefaultStorageClass    = "storageclass.kubernetes.io/is-default-class"
	annDefaultVirtStorageClas = "storageclass.kubevirt.io/is-default-virt-class"
)

// dataVolumeController is CDI's DataVolume controller, simulated: a DataVolume whose storage
// class exists is bound at once and imports its disk in Timings.Import; no PVC or importer
// pod is created. A storage class that does not exist leaves it unbound, as CDI does.
type dataVolumeController struct {
	client   client.Client
	recorder record.EventRecorder
	cfg      Config
}

func (c *dataVolumeController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	dv := &cdiv1.DataVolume{}
	if err := c.client.Get(ctx, req.NamespacedName, dv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if dv.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	className, accessModes := storageOf(dv)
	class, err := c.storageClass(ctx, className)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := c.cfg.Clock.Now()
	next := dv.DeepCopy()
	requeue, event := dataVolumeStep(next, class != nil, len(accessModes) > 0, c.cfg, now)
	if !equality.Semantic.DeepEqual(dv.Status, next.Status) {
		if err := c.client.Status().Update(ctx, next); err != nil {
			return reconcile.Result{}, fmt.Errorf("updating datavolume %s: %w", req.NamespacedName, err)
		}
		if event != "" {
			c.recorder.Event(next, corev1.EventTypeWarning, reasonClaimNotValid, event)
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// dataVolumeStep decides a DataVolume's status; it returns when to look again and the
// warning to record, if any.
func dataVolumeStep(dv *cdiv1.DataVolume, classExists, hasAccessModes bool, cfg Config, now time.Time) (time.Duration, string) {
	st := &dv.Status
	t := cfg.Timings
	if !classExists {
		st.Progress = "N/A"
		setReadyRunning := func() {
			st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", now)
			st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "", "", now)
		}
		if !hasAccessModes {
			// renderPvcSpec fails: no PVC, phase unset, ErrClaimNotValid.
			st.Phase = cdiv1.PhaseUnset
			st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeBound, corev1.ConditionFalse, "No PVC found", reasonNotFound, now)
			setReadyRunning()
			return t.Retry, messageNoStorageClass
		}
		// The PVC is created but no provisioner serves its class: it stays Pending.
		st.Phase = cdiv1.Pending
		st.ClaimName = dv.Name
		st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeBound, corev1.ConditionFalse, fmt.Sprintf("PVC %s Pending", dv.Name), reasonPVCPending, now)
		setReadyRunning()
		return t.Retry, ""
	}

	st.ClaimName = dv.Name
	st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeBound, corev1.ConditionTrue, fmt.Sprintf("PVC %s Bound", dv.Name), reasonPVCBound, now)
	if st.Phase == cdiv1.Succeeded {
		return 0, ""
	}
	bound := now
	for _, c := range st.Conditions {
		if c.Type == cdiv1.DataVolumeBound {
			bound = c.LastTransitionTime.Time
		}
	}
	elapsed := now.Sub(bound)
	if img, ok := registryImage(dv); ok {
		if _, exists := cfg.guest(img); !exists {
			// The importer pod fails to read the image and is restarted.
			st.Phase = cdiv1.ImportInProgress
			st.Progress = "N/A"
			st.RestartCount = int32(elapsed / t.ImagePullBackOff)
			msg := fmt.Sprintf("Unable to process data: Unable to transfer source data to scratch space: Failed to read registry image: Could not fetch image %s: manifest unknown", fullImageName(img))
			st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, msg, reasonImporterError, now)
			st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", now)
			return t.ImagePullBackOff - elapsed%t.ImagePullBackOff, ""
		}
	}
	switch {
	case elapsed < t.Import/4:
		st.Phase = cdiv1.ImportScheduled
		st.Progress = "N/A"
		st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "", "", now)
		st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", now)
		return t.Import/4 - elapsed, ""
	case elapsed < t.Import:
		st.Phase = cdiv1.ImportInProgress
		st.Progress = cdiv1.DataVolumeProgress(fmt.Sprintf("%.2f%%", float64(elapsed)*100/float64(t.Import)))
		st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "", "", now)
		st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", reasonTransferRunning, now)
		return t.Import - elapsed, ""
	}
	st.Phase = cdiv1.Succeeded
	st.Progress = "100.0%"
	st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Import Complete", reasonImportCompleted, now)
	st.Conditions = setDVCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionTrue, "", "", now)
	return 0, ""
}

// storageOf is the storage class name and access modes a DataVolume asks for.
func storageOf(dv *cdiv1.DataVolume) (string, []corev1.PersistentVolumeAccessMode) {
	switch {
	case dv.Spec.Storage != nil:
		name := ""
		if dv.Spec.Storage.StorageClassName != nil {
			name = *dv.Spec.Storage.StorageClassName
		}
		return name, dv.Spec.Storage.AccessModes
	case dv.Spec.PVC != nil:
		name := ""
		if dv.Spec.PVC.StorageClassName != nil {
			name = *dv.Spec.PVC.StorageClassName
		}
		return name, dv.Spec.PVC.AccessModes
	}
	return "", nil
}

// storageClass is the named class, or with no name the default one (the virtualization
// default first, as CDI's GetStorageClassByNameWithVirtFallback); nil when there is none.
func (c *dataVolumeController) storageClass(ctx context.Context, name string) (*storagev1.StorageClass, error) {
	if name != "" {
		sc := &storagev1.StorageClass{}
		err := c.client.Get(ctx, types.NamespacedName{Name: name}, sc)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading storage class %s: %w", name, err)
		}
		return sc, nil
	}
	list := &storagev1.StorageClassList{}
	if err := c.client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing storage classes: %w", err)
	}
	for _, ann := range []string{annDefaultVirtStorageClas, annDefaultStorageClass} {
		for i := range list.Items {
			if list.Items[i].Annotations[ann] == "true" {
				return &list.Items[i], nil
			}
		}
	}
	return nil, nil
}

// registryImage is the image of a DataVolume's registry source (docker://<image>).
func registryImage(dv *cdiv1.DataVolume) (string, bool) {
	if dv.Spec.Source == nil || dv.Spec.Source.Registry == nil || dv.Spec.Source.Registry.URL == nil {
		return "", false
	}
	url := *dv.Spec.Source.Registry.URL
	for _, scheme := range []string{"docker://", "oci-archive://"} {
		if img, ok := strings.CutPrefix(url, scheme); ok {
			return img, true
		}
	}
	return url, true
}

func setDVCondition(conds []cdiv1.DataVolumeCondition, t cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, message, reason string, now time.Time) []cdiv1.DataVolumeCondition {
	for i := range conds {
		if conds[i].Type != t {
			continue
		}
		if conds[i].Status != status {
			conds[i].LastTransitionTime = metav1.NewTime(now)
			conds[i].LastHeartbeatTime = conds[i].LastTransitionTime
		}
		conds[i].Status, conds[i].Message, conds[i].Reason = status, message, reason
		return conds
	}
	return append(conds, cdiv1.DataVolumeCondition{Type: t, Status: status, Message: message, Reason: reason,
		LastTransitionTime: metav1.NewTime(now), LastHeartbeatTime: metav1.NewTime(now)})
}

func decodeBase64(s string) ([]byte, error) {
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decoding cloud-init userDataBase64: %w", err)
	}
	return data, nil
}
