// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// userDataLimit is the most user data a Hetzner Cloud server accepts (32 KiB).
var userDataLimit = resource.MustParse("32Ki")

// What the kubelet of a server reports, of its nominal memory and disk: the kernel and the
// file system keep the rest (measured on cx23: 3.8 of 4 GiB, 37 of 40 GiB). A catalogue type's
// capacity is the nominal size times these, so Karpenter never expects more than a node has.
const (
	memoryReported = 0.92
	diskReported   = 0.92
)

// Resolve reads every server type with its prices per location (GET /server_types, one
// request per 50 types) and makes each a node type: capacity, architecture, one offering per
// location at the hourly price (net, or gross when the class says), and the 32 KiB user data
// limit. Offerings of a deprecated type, or in a location where the type is not available
// now, are listed but unavailable.
func (f *Family) Resolve(ctx context.Context, s family.Scope) ([]family.CatalogType, error) {
	a, err := newAPI(s)
	if err != nil {
		return nil, err
	}
	types, err := a.serverTypes(ctx)
	if err != nil {
		return nil, familyError("read server types", err)
	}
	gross := s.Class != nil && s.Class.Spec.Catalog.GrossPrices()
	out := make([]family.CatalogType, 0, len(types))
	for i := range types {
		ct, err := catalogType(&types[i], gross)
		if err != nil {
			return nil, fmt.Errorf("server type %s: %w", types[i].Name, err)
		}
		out = append(out, ct)
	}
	return out, nil
}

// catalogType makes a node type of a server type.
func catalogType(st *schema.ServerType, gross bool) (family.CatalogType, error) {
	arch := v1alpha1.DefaultArchitecture
	if st.Architecture == "arm" {
		arch = "arm64"
	}
	nt := v1alpha1.NodeType{
		Name:         st.Name,
		Architecture: arch,
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU:              *resource.NewQuantity(int64(st.Cores), resource.DecimalSI),
			corev1.ResourceMemory:           mebibytes(float64(st.Memory) * 1024 * memoryReported),
			corev1.ResourceEphemeralStorage: mebibytes(float64(st.Disk) * 1024 * diskReported),
			corev1.ResourcePods:             resource.MustParse("110"),
		},
		UserDataLimit: &userDataLimit,
	}
	deprecated := st.Deprecation != nil
	available := map[string]bool{}
	for _, l := range st.Locations {
		available[l.Name] = l.Available && l.Deprecation == nil
	}
	for _, p := range st.Prices {
		amount := p.PriceHourly.Net
		if gross {
			amount = p.PriceHourly.Gross
		}
		price, err := strconv.ParseFloat(amount, 64)
		if err != nil || price < 0 {
			return family.CatalogType{}, fmt.Errorf("price %q in %s is no amount", amount, p.Location)
		}
		ok, listed := available[p.Location]
		nt.Offerings = append(nt.Offerings, v1alpha1.Offering{
			Zone:        p.Location,
			Price:       strconv.FormatFloat(price, 'f', -1, 64),
			Unavailable: deprecated || (len(st.Locations) > 0 && (!listed || !ok)),
		})
	}
	return family.CatalogType{
		NodeType:   nt,
		Series:     strings.TrimRight(st.Name, "0123456789"),
		CPU:        st.CPUType,
		Cores:      st.Cores,
		Memory:     *resource.NewQuantity(int64(float64(st.Memory)*(1<<30)), resource.BinarySI),
		Deprecated: deprecated,
	}, nil
}

func mebibytes(mi float64) resource.Quantity {
	return *resource.NewQuantity(int64(mi)*(1<<20), resource.BinarySI)
}
