// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fulfillment is the fulfiller's record of one NodeClaim (same name): what Create decided,
// and where the claim is — each stage a condition with a timestamp, each tofu run with the
// name to read its log by.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ff,categories=karpenter
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.nodeType`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Price",type=string,JSONPath=`.spec.price`
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.status.providerID`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`,priority=1
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.status.currentRun`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
type Fulfillment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FulfillmentSpec   `json:"spec,omitempty"`
	Status FulfillmentStatus `json:"status,omitempty"`
}

// AnnotationDeleteCalled is set on a Fulfillment (to the time, RFC 3339) when Karpenter calls
// CloudProvider.Delete for its claim, after draining the node. A Fulfillment deleted otherwise
// (by a user) whose NodeClaim is launched is not destroyed until then: the fulfiller deletes
// the NodeClaim, so the node is drained first.
const AnnotationDeleteCalled = Group + "/delete-called"

// FulfillmentSpec is what CloudProvider.Create decided; it does not change afterwards.
type FulfillmentSpec struct {
	NodeClaimUID string `json:"nodeClaimUID"`
	NodeClass    string `json:"nodeClass"`
	// +optional
	NodePool     string `json:"nodePool,omitempty"`
	NodeType     string `json:"nodeType"`
	Zone         string `json:"zone"`
	CapacityType string `json:"capacityType"`
	// Price of the chosen offering, per hour.
	// +optional
	Price string `json:"price,omitempty"`
	// NodeName is the name the machine registers its Node with.
	NodeName string `json:"nodeName"`
	// ProviderID when the node type makes it known before the apply.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// StateKey names the claim's OpenTofu state (the kubernetes backend's secret_suffix).
	StateKey string `json:"stateKey"`
	// Module is the module source every run of the claim uses: a folder, or a remote source
	// pinned to what the class resolved it to at Create (a git source to its commit).
	Module string `json:"module"`
	// ModuleVersion is the exact version of a registry module (ModuleStatus.Version) every
	// run fetches.
	// +optional
	ModuleVersion string `json:"moduleVersion,omitempty"`
	// ModuleDigest is the content the module had at Create (ModuleStatus.Digest): an apply
	// of other content fails with InvalidModule.
	// +optional
	ModuleDigest string `json:"moduleDigest,omitempty"`
	// Hash of the NodeClass, node type and module version used; compared for drift.
	Hash string `json:"hash"`
	// Parameters are what the class's family chose for this claim at Create (a leased
	// server's number and path), passed to the module's parameters over the class's variables.
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`
	// Settings are what every run of the claim uses, its retries and its destroy included,
	// recorded from the class and node type when Create decided: an edited or deleted class
	// cannot change how an existing machine is destroyed. Absent in Fulfillments made before
	// they were recorded; those use their class's.
	// +optional
	Settings *RunSettings `json:"settings,omitempty"`
}

// RunSettings are a claim's run settings as its class and node type said at Create.
type RunSettings struct {
	// Backend of the claim's state, its namespace resolved (the class's, or the fulfiller's
	// state namespace), with the Secret references of the pg connection and the encryption
	// key.
	Backend Backend `json:"backend"`
	// Credentials are the Secrets whose keys become the runs' environment.
	// +optional
	Credentials []CredentialsSource `json:"credentials,omitempty"`
	// Parameters are the module's parameters input: the class's variables, the node type's
	// over them.
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`
	// Labels are the module's labels input: the node's labels and its NodePool.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// ApplyDeadline bounds each apply run (the node type's deadlines.apply).
	// +optional
	ApplyDeadline *metav1.Duration `json:"applyDeadline,omitempty"`
}

type FulfillmentStatus struct {
	// Conditions per stage: Applied, Joined, Initialized roll up into Ready; Destroyed once the
	// machine and its state are gone.
	// +optional
	Conditions []status.Condition `json:"conditions,omitempty"`
	// Phase is a display value derived from the conditions.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Reason and Message explain the phase in one line (from the condition that decides it).
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// ProviderID of the machine (from the module's provider_id output or the template).
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// NodeName of the registered Node.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Addresses the module reported.
	// +optional
	Addresses []string `json:"addresses,omitempty"`
	// Stages records when each stage was reached.
	// +optional
	Stages Stages `json:"stages,omitempty"`
	// CurrentRun is the run in progress (or the last one): `kubectl logs` it, or read its log file.
	// +optional
	CurrentRun string `json:"currentRun,omitempty"`
	// Runs are the tofu runs of this claim, oldest first (bounded).
	// +optional
	Runs []Run `json:"runs,omitempty"`
	// UserDataSecret names the Secret that holds the claim's rendered user data.
	// +optional
	UserDataSecret string `json:"userDataSecret,omitempty"`
	// TokenID is the public half of the claim's bootstrap token (never the secret).
	// +optional
	TokenID string `json:"tokenID,omitempty"`
	// LockHolder is who holds the claim's state lock while a run waits for it.
	// +optional
	LockHolder *LockHolder `json:"lockHolder,omitempty"`
	// EncryptionKeyFingerprint identifies the passphrase the claim's state is encrypted with
	// (pbkdf2, no cheaper to guess from than the state), recorded when its first run started:
	// a passphrase changed in its Secret afterwards is reported (EncryptionKeyChanged) before
	// any run fails to decrypt the state.
	// +optional
	EncryptionKeyFingerprint string `json:"encryptionKeyFingerprint,omitempty"`
}

// LockHolder is who holds a state lock, from the lock's own record.
type LockHolder struct {
	// Who took the lock: user@hostname of the tofu process (a runner pod's name, or a host).
	Who string `json:"who"`
	// ID of the lock, what `tofu force-unlock` takes.
	ID string `json:"id"`
	// +optional
	Operation string `json:"operation,omitempty"`
	// Since is when the lock was taken.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Run of this claim that took the lock, when it is one.
	// +optional
	Run string `json:"run,omitempty"`
}

type Stages struct {
	// +optional
	ClaimCreated *metav1.Time `json:"claimCreated,omitempty"`
	// +optional
	ApplyStarted *metav1.Time `json:"applyStarted,omitempty"`
	// +optional
	Applied *metav1.Time `json:"applied,omitempty"`
	// +optional
	Registered *metav1.Time `json:"registered,omitempty"`
	// +optional
	Initialized *metav1.Time `json:"initialized,omitempty"`
	// CNIReady, GPUReady and GatesReady: when each readiness gate opened (its taint removed).
	// +optional
	CNIReady *metav1.Time `json:"cniReady,omitempty"`
	// +optional
	GPUReady *metav1.Time `json:"gpuReady,omitempty"`
	// +optional
	GatesReady *metav1.Time `json:"gatesReady,omitempty"`
	// +optional
	DestroyStarted *metav1.Time `json:"destroyStarted,omitempty"`
	// +optional
	Destroyed *metav1.Time `json:"destroyed,omitempty"`
}

// RunPhase is where a tofu run is.
type RunPhase string

const (
	RunRunning   RunPhase = "Running"
	RunSucceeded RunPhase = "Succeeded"
	RunFailed    RunPhase = "Failed"
)

type Run struct {
	// Name of the run (the runner's Job, or the local runner's folder).
	Name string `json:"name"`
	// Operation is apply or destroy.
	Operation string   `json:"operation"`
	Attempt   int      `json:"attempt"`
	Phase     RunPhase `json:"phase"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// ErrorClass classifies a failure (InsufficientCapacity, StateLocked, InvalidModule, ...).
	// +optional
	ErrorClass string `json:"errorClass,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// RetryAfter: a failed run is not retried before this time, when the cloud API's rate
	// limit that failed it resets (RateLimit-Reset of Hetzner Cloud).
	// +optional
	RetryAfter *metav1.Time `json:"retryAfter,omitempty"`
	// Log is where to read the run: a file path for the local executor.
	// +optional
	Log string `json:"log,omitempty"`
	// LogTail is the end of a failed run's log, kept when the run ended so that why it
	// failed outlives its runner (a runner Job is deleted after its TTL): tofu's messages, one
	// a line with their time and level, redacted as the log is, at most 4 KiB.
	// `fulfiller logs <claim>` prints it once the runner's log is gone.
	// +optional
	LogTail string `json:"logTail,omitempty"`
}

func (in *Fulfillment) StatusConditions(opts ...status.ForOption) status.ConditionSet {
	return status.NewReadyConditions(ConditionApplied, ConditionJoined, ConditionCNIReady, ConditionGPUReady, ConditionGatesReady, ConditionInitialized).For(in, opts...)
}

func (in *Fulfillment) GetConditions() []status.Condition { return in.Status.Conditions }

func (in *Fulfillment) SetConditions(conditions []status.Condition) {
	in.Status.Conditions = conditions
}

// +kubebuilder:object:root=true
type FulfillmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Fulfillment `json:"items"`
}
