// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// List returns the servers of the class's project that carry this cluster's label
// (label_selector fulfiller.sh/cluster==<cluster>), attributed by the labels
// modules/hetzner-cloud sets: the claim (karpenter.sh/nodeclaim, or fulfiller.sh/node for a
// server made before the fulfiller passed it), the class and the NodePool. Without a cluster
// name it lists nothing: no server could be proven this cluster's.
func (f *Family) List(ctx context.Context, s family.Scope) ([]family.Machine, error) {
	if s.Cluster == "" {
		return nil, nil
	}
	a, err := newAPI(s)
	if err != nil {
		return nil, err
	}
	servers, err := a.servers(ctx, keys.LabelCluster+"=="+s.Cluster)
	if err != nil {
		return nil, familyError("list servers", err)
	}
	out := make([]family.Machine, 0, len(servers))
	for i := range servers {
		if m := machine(&servers[i]); m.Cluster == s.Cluster {
			out = append(out, m)
		}
	}
	return out, nil
}

func machine(srv *schema.Server) family.Machine {
	claim := srv.Labels[keys.LabelNodeClaim]
	if claim == "" {
		claim = srv.Labels["fulfiller.sh/node"]
	}
	return family.Machine{
		ID:         strconv.FormatInt(srv.ID, 10),
		Name:       srv.Name,
		ProviderID: v1alpha1.DefaultProviderIDPrefix + strconv.FormatInt(srv.ID, 10),
		Cluster:    srv.Labels[keys.LabelCluster],
		Claim:      claim,
		Class:      srv.Labels[keys.LabelNodeClass],
		NodePool:   srv.Labels[keys.LabelNodePool],
		// The API gives the creation time to the second.
		Created: family.LatestWithin(srv.Created, time.Second),
	}
}

// Delete deletes a server after reading it again: only while it still carries this
// cluster's label and the claim it was listed with.
func (f *Family) Delete(ctx context.Context, s family.Scope, m family.Machine) error {
	id, err := strconv.ParseInt(m.ID, 10, 64)
	if err != nil {
		return fmt.Errorf("server id %q: %w", m.ID, err)
	}
	a, err := newAPI(s)
	if err != nil {
		return err
	}
	srv, ok, err := a.server(ctx, id)
	if err != nil {
		return familyError("read server "+m.ID, err)
	}
	if !ok {
		return nil
	}
	if now := machine(&srv); s.Cluster == "" || now.Cluster != s.Cluster || now.Claim != m.Claim {
		return fmt.Errorf("server %s (%s) is no longer labelled as cluster %s's claim %s: not deleted", m.Name, m.ID, s.Cluster, m.Claim)
	}
	if err := a.deleteServer(ctx, id); err != nil {
		return familyError("delete server "+m.ID, err)
	}
	return nil
}

var _ family.MachinesAccount = (*Family)(nil)

// MachinesAccount implements family.MachinesAccount: the project of the scope's token and
// endpoint, named as its API budget is (a hash, never the token), so that classes of one
// project list its servers once per pass.
func (*Family) MachinesAccount(s family.Scope) string {
	return projectName(s.Env)
}
