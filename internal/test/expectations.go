// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package test

import (
	"context"
	"testing"

	"github.com/awslabs/operatorpkg/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ExpectApplied creates each object, or updates it (status included) when it exists.
func ExpectApplied(t testing.TB, c client.Client, objs ...client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		current := o.DeepCopyObject().(client.Object)
		err := c.Get(ctx, client.ObjectKeyFromObject(o), current)
		switch {
		case apierrors.IsNotFound(err):
			withStatus := o.DeepCopyObject().(client.Object)
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
			}
			// The API server drops status on create; set it as the object had it.
			withStatus.SetResourceVersion(o.GetResourceVersion())
			if err := c.Status().Update(ctx, withStatus); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("setting the status of %T %s: %v", o, o.GetName(), err)
			}
		case err != nil:
			t.Fatalf("reading %T %s: %v", o, o.GetName(), err)
		default:
			o.SetResourceVersion(current.GetResourceVersion())
			withStatus := o.DeepCopyObject().(client.Object)
			if err := c.Update(ctx, o); err != nil {
				t.Fatalf("updating %T %s: %v", o, o.GetName(), err)
			}
			withStatus.SetResourceVersion(o.GetResourceVersion())
			if err := c.Status().Update(ctx, withStatus); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("updating the status of %T %s: %v", o, o.GetName(), err)
			}
		}
	}
}

// ExpectExists reads obj's current state into it and returns it.
func ExpectExists[T client.Object](t testing.TB, c client.Client, obj T) T {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("%T %s: %v", obj, obj.GetName(), err)
	}
	return obj
}

// ExpectNotFound checks that none of objs exists.
func ExpectNotFound(t testing.TB, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object))
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T %s exists (%v), want it gone", o, o.GetName(), err)
		}
	}
}

// ExpectCondition checks a condition's status and reason and returns it.
func ExpectCondition(t testing.TB, obj status.Object, conditionType string, want metav1.ConditionStatus, reason string) *status.Condition {
	t.Helper()
	var cond *status.Condition
	for i, c := range obj.GetConditions() {
		if c.Type == conditionType {
			cond = &obj.GetConditions()[i]
		}
	}
	if cond == nil || cond.Status != want || cond.Reason != reason {
		t.Errorf("%s of %s = %+v, want %s with reason %s", conditionType, obj.GetName(), cond, want, reason)
		return &status.Condition{}
	}
	return cond
}

// ExpectDeleting checks that each object is being deleted (or gone).
func ExpectDeleting(t testing.TB, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		current := o.DeepCopyObject().(client.Object)
		err := c.Get(context.Background(), client.ObjectKeyFromObject(o), current)
		if err == nil && current.GetDeletionTimestamp().IsZero() {
			t.Errorf("%T %s is not being deleted", o, o.GetName())
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("%T %s: %v", o, o.GetName(), err)
		}
	}
}
