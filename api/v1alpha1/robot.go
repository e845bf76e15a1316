// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RobotPool is the pool of a robot class (spec.family: robot): the Hetzner Robot dedicated
// servers its node types are made of, and how they are activated. Each server is leased to
// one claim at a time (a Lease per server in the state namespace).
type RobotPool struct {
	// Servers of the pool by number, each with the node type whose capacity are its hardware
	// facts. A declared server is the operator's word that the fulfiller may install it.
	// +optional
	Servers []RobotServer `json:"servers,omitempty"`
	// Discover adds the account's servers (GET /server) that match, each with a node type.
	// +optional
	Discover []RobotDiscovery `json:"discover,omitempty"`
	// Warm is how many servers of each node type the pool keeper keeps installed and waiting
	// in standby, installing them cold ahead of need (default 1).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Warm *int32 `json:"warm,omitempty"`
	// WarmActivation is how long a warm activation (join configuration over SSH) is expected
	// to take (default 2m); ColdActivation how long a cold one (rescue, installimage, reboot)
	// does (default 20m). A type whose cold path and join timeout do not fit Karpenter's
	// 15-minute registration window is offered only while warm servers exist.
	// +optional
	WarmActivation *metav1.Duration `json:"warmActivation,omitempty"`
	// +optional
	ColdActivation *metav1.Duration `json:"coldActivation,omitempty"`
}

// RobotServer is one declared server of a pool.
type RobotServer struct {
	// +kubebuilder:validation:Minimum=1
	Number int32 `json:"number"`
	// NodeType is the name of the spec.nodeTypes entry the server is.
	NodeType string `json:"nodeType"`
	// SSHAddress (host:port) is where SSH reaches the server instead of its main IP on port
	// 22 (spec.variables ssh_host and ssh_port): a NAT, a private network, the stand-ins.
	// +optional
	SSHAddress string `json:"sshAddress,omitempty"`
}

// SSHAddressOf is the SSH address declared for a server; empty when none is.
func (p *RobotPool) SSHAddressOf(number int) string {
	if p == nil {
		return ""
	}
	for _, s := range p.Servers {
		if int(s.Number) == number {
			return s.SSHAddress
		}
	}
	return ""
}

// RobotDiscovery selects servers of the account: by name prefix, product, or both; at least
// one of them (an entry with neither, or whose field name is misspelt and dropped, would take
// every server of the account).
// +kubebuilder:validation:XValidation:rule="(has(self.namePrefix) && size(self.namePrefix) > 0) || (has(self.product) && size(self.product) > 0)",message="a discover entry needs namePrefix or product: without either it would take every server of the Robot account"
type RobotDiscovery struct {
	// +optional
	NamePrefix string `json:"namePrefix,omitempty"`
	// +optional
	Product  string `json:"product,omitempty"`
	NodeType string `json:"nodeType"`
}

// HasSelector reports whether the entry selects by name prefix or product, not the whole
// account.
func (d RobotDiscovery) HasSelector() bool { return d.NamePrefix != "" || d.Product != "" }

// Validate returns what is wrong with the pool's declaration that the API server may not have
// refused (a CRD installed before its rules): a discover entry without a selector.
func (p *RobotPool) Validate() []error {
	if p == nil {
		return nil
	}
	var errs []error
	for i, d := range p.Discover {
		if !d.HasSelector() {
			errs = append(errs, fmt.Errorf("robot.discover[%d] (node type %s) has neither namePrefix nor product: it would take every server of the Robot account", i, d.NodeType))
		}
	}
	return errs
}

// RegistrationWindow is Karpenter's fixed window for a claim's Node to register (its
// registration TTL): a machine that takes longer is deleted.
const RegistrationWindow = 15 * time.Minute

// Defaults of a RobotPool.
const (
	DefaultRobotWarmActivation = 2 * time.Minute
	DefaultRobotColdActivation = 20 * time.Minute
)

// WarmOrDefault is the number of standby servers kept per node type.
func (p *RobotPool) WarmOrDefault() int {
	if p == nil || p.Warm == nil {
		return 1
	}
	return int(*p.Warm)
}

// ColdActivationOrDefault is how long a cold activation is expected to take.
func (p *RobotPool) ColdActivationOrDefault() metav1.Duration {
	if p == nil || p.ColdActivation == nil {
		return metav1.Duration{Duration: DefaultRobotColdActivation}
	}
	return *p.ColdActivation
}

// WarmActivationOrDefault is how long a warm activation is expected to take.
func (p *RobotPool) WarmActivationOrDefault() metav1.Duration {
	if p == nil || p.WarmActivation == nil {
		return metav1.Duration{Duration: DefaultRobotWarmActivation}
	}
	return *p.WarmActivation
}

// Conditions of a class with a finite pool (informational: Ready is not composed of them).
const (
	// ConditionPoolReady is True while the pool has no quarantined server and every type's
	// paths are offered; False names quarantined servers (with their reasons) and the types
	// offered warm only.
	ConditionPoolReady = "PoolReady"
	// ReasonPoolHealthy: nothing to say.
	ReasonPoolHealthy = "PoolHealthy"
	// ReasonServersQuarantined: servers failed activation or reinstall twice and are not
	// offered until someone clears them.
	ReasonServersQuarantined = "ServersQuarantined"
	// ReasonColdExceedsWindow: a type's cold path does not fit the registration window; it is
	// offered only while warm servers exist.
	ReasonColdExceedsWindow = "ColdPathExceedsWindow"
	// ReasonPoolInvalid: the pool names a server the account does not have, a node type the
	// class does not have, or one server twice.
	ReasonPoolInvalid = "PoolInvalid"
	// ReasonPoolUnchecked: the account could not be read (credentials, rate limit).
	ReasonPoolUnchecked = "PoolUnchecked"
	// ReasonPoolExhausted (NodeClaim Launched, via insufficient capacity): no free server of
	// the type can be activated within the window now.
	ReasonPoolExhausted = "PoolExhausted"
	// ReasonServerQuarantined (event): a server was quarantined.
	ReasonServerQuarantined = "ServerQuarantined"
)
