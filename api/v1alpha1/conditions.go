// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"github.com/awslabs/operatorpkg/status"

	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// The conditions of the fulfiller's API and their reasons. A reason is part of the API: people
// and alerts match on it, and docs/concepts.md documents each one. Code sets conditions only
// with these constants; the one exception is a failed run, whose reason is its failure class
// (tfrunner.ErrorClass: InsufficientCapacity, QuotaExceeded, InvalidModule, ...).

// Condition types of a Fulfillment. Applied, Joined, the gate conditions and Initialized roll
// up into Ready (StatusConditions); Destroyed is set once the claim is deleted.
const (
	ConditionApplied     = "Applied"
	ConditionJoined      = "Joined"
	ConditionCNIReady    = "CNIReady"
	ConditionGPUReady    = "GPUReady"
	ConditionGatesReady  = "GatesReady" // every custom gate of the NodeClass
	ConditionInitialized = "Initialized"
	ConditionDestroyed   = "Destroyed"
)

// Reasons of the Applied and Destroyed conditions (a failed run's reason is its class).
const (
	// ReasonApplying: a tofu apply runs; the message is its latest progress.
	ReasonApplying = "Applying"
	// ReasonDestroying: a tofu destroy runs.
	ReasonDestroying = "Destroying"
	// ReasonWaitingForRunner: the run waits for a free runner slot: as many runs are in
	// progress as the machine (local executor) or the cluster's nodes (runner Jobs) hold, or
	// as FULFILLER_MAX_CONCURRENT_RUNS allows; the message has the numbers.
	ReasonWaitingForRunner = "WaitingForRunner"
	// ReasonWaitingForAPIBudget: the run waits until the API request budget its family's
	// cloud enforces (e.g. a Hetzner Cloud project's requests per hour) holds what a run is
	// estimated to make; the message has the numbers and when.
	ReasonWaitingForAPIBudget = "WaitingForAPIBudget"
	// ReasonStateLocked: the run waits for its claim's state lock; the message says who holds
	// it since when.
	ReasonStateLocked = "StateLocked"
	// ReasonApplyOverdue: the apply runs longer than its node type's deadlines.apply; its
	// runner is interrupting it and the run ends with class Timeout.
	ReasonApplyOverdue = "ApplyOverdue"
	// ReasonStoppingApply: the claim was deleted while its apply ran; the destroy waits for the
	// interrupted apply to stop (tofu releases its lock).
	ReasonStoppingApply = "StoppingApply"
	// ReasonAwaitingNodeClaimDeletion: the Fulfillment was deleted while its NodeClaim lives;
	// the fulfiller deleted the NodeClaim, and the destroy waits until Karpenter has drained
	// its node and called Delete.
	ReasonAwaitingNodeClaimDeletion = "AwaitingNodeClaimDeletion"
	// ReasonApplied: the machine exists (True).
	ReasonApplied = "Applied"
	// ReasonDestroyed: the machine is destroyed and its state removed (True).
	ReasonDestroyed = "Destroyed"
	// ReasonNodeClassNotFound: the claim's NodeClass or node type is gone before its apply.
	ReasonNodeClassNotFound = "NodeClassNotFound"
	// ReasonProviderIDMismatch: the module's provider_id output differs from the one the node
	// type's template predicted.
	ReasonProviderIDMismatch = "ProviderIDMismatch"
	// ReasonUserDataTooLarge: the user data exceeds the node type's userDataLimit even
	// compressed; no token and no machine.
	ReasonUserDataTooLarge = "UserDataTooLarge"
	// ReasonInvalidExtraCloudConfig: bootstrap.extraCloudConfig does not merge into the user
	// data.
	ReasonInvalidExtraCloudConfig = "InvalidExtraCloudConfig"
)

// Reasons of the Joined condition.
const (
	ReasonAwaitingNode = "AwaitingNode"
	ReasonJoined       = "Joined"
	// ReasonJoinTimeout: the machine was created but its Node never registered within the
	// node type's joinTimeout.
	ReasonJoinTimeout = "JoinTimeout"
	// ReasonMachineDeleted: the machine was deleted behind the fulfiller's back (its family
	// saw it gone); the claim is replaced and its state cleaned up.
	ReasonMachineDeleted = "MachineDeleted"
	// ReasonInstalling: the machine reported that it installs its node software
	// (bootstrap.install packages).
	ReasonInstalling = "Installing"
	// ReasonJoining: the machine reported that it runs kubeadm join.
	ReasonJoining = "Joining"
	// ReasonBootstrapFailed: the machine reported that a step of its boot failed; the
	// message has the step and the failing command's last line. The claim is replaced and
	// the machine destroyed.
	ReasonBootstrapFailed = "BootstrapFailed"
)

// Reasons of the Joined condition while a KubeVirt claim's VM has not joined (its family's
// MachineWatcher), the message in the VM's own words. At the node type's join timeout an
// unschedulable VM counts as insufficient capacity for its offering.
const (
	// ReasonVMScheduling: the VM's VMI waits for its launcher pod to be scheduled.
	ReasonVMScheduling = "VMScheduling"
	// ReasonVMUnschedulable: the infra cluster has no room for the VM (ErrorUnschedulable).
	ReasonVMUnschedulable = "VMUnschedulable"
	// ReasonVMImagePullFailed: the VM's disk image cannot be pulled (ErrImagePull,
	// ImagePullBackOff).
	ReasonVMImagePullFailed = "VMImagePullFailed"
	// ReasonVMStartFailed: the VM fails to start (CrashLoopBackOff, a DataVolume error, a
	// missing PVC).
	ReasonVMStartFailed = "VMStartFailed"
	// ReasonVMStarting: the VM is scheduled, or its disk provisioned, and starts.
	ReasonVMStarting = "VMStarting"
	// ReasonVMRunning: the VM runs, its guest has not joined yet.
	ReasonVMRunning = "VMRunning"
)

// Reasons of the readiness gate conditions (CNIReady, GPUReady, GatesReady).
const (
	ReasonGateOpen          = "GateOpen"
	ReasonGateNotApplicable = "NotApplicable"
	ReasonAwaitingCNI       = "AwaitingCni"
	ReasonAwaitingGPU       = "AwaitingGpu"
	ReasonAwaitingCustom    = "AwaitingCustom"
	ReasonCNINotReady       = "CNINotReady"
	ReasonGPUNotRegistered  = "GPUNotRegistered"
	ReasonGPUNotValidated   = "GPUNotValidated"
	ReasonCustomGateNotMet  = "CustomGateNotMet"
)

// Reasons of the Initialized condition (while waiting, Karpenter's own reason when it gives
// one).
const (
	ReasonAwaitingInitialization = "AwaitingInitialization"
	ReasonInitialized            = "Initialized"
)

// ConditionScaleDownHeld is on the Fulfillments of a class whose spec.scaleDown.policy is
// AtPaidPeriodEnd, once their node is initialized: True while the fulfiller keeps a node that
// Karpenter would consolidate as empty (karpenter.sh/do-not-disrupt on its Node, marked with
// keys.AnnotationScaleDownHeld) until the margin before its paid period ends; False with the
// reason it is not kept. Ready is not composed of it; a Ready claim that is kept shows its
// reason and message as the phase's, in `kubectl get fulfillments`.
const ConditionScaleDownHeld = "ScaleDownHeld"

// Reasons of the ScaleDownHeld condition.
const (
	// ReasonHeldForPaidPeriod: the node is empty and Karpenter would consolidate it, but its
	// billing period is paid; it is kept, taking new pods, until the message's time (True).
	ReasonHeldForPaidPeriod = "HeldForPaidPeriod"
	// ReasonPaidPeriodEnding: the node is empty and within the margin before its paid period
	// ends: let go, Karpenter consolidates it.
	ReasonPaidPeriodEnding = "PaidPeriodEnding"
	// ReasonNotConsolidatable: Karpenter would not consolidate the node now (its NodeClaim is
	// not Consolidatable: a pod came or went within the NodePool's consolidateAfter, or the
	// NodePool does not consolidate).
	ReasonNotConsolidatable = "NotConsolidatable"
	// ReasonNotEmpty: pods other than daemons run on the node.
	ReasonNotEmpty = "NotEmpty"
	// ReasonNodeDrifted, ReasonNodeExpired, ReasonNodeUnhealthy: Karpenter replaces the node
	// whatever it cost (its NodeClaim is Drifted; past its expireAfter; its Node not Ready):
	// never kept.
	ReasonNodeDrifted   = "Drifted"
	ReasonNodeExpired   = "Expired"
	ReasonNodeUnhealthy = "Unhealthy"
	// ReasonDoNotDisruptSet: the Node has a karpenter.sh/do-not-disrupt annotation the
	// fulfiller did not set (someone else's, kept as it is): the policy leaves the node alone.
	ReasonDoNotDisruptSet = "DoNotDisruptSet"
)

// Reasons of events that no condition has.
const (
	// ReasonApplyStarted: a tofu apply run started (event).
	ReasonApplyStarted = "ApplyStarted"
	// ReasonStaleLockRecovered: a state lock left by a run of this claim whose runner is
	// gone was released (event).
	ReasonStaleLockRecovered = "StaleLockRecovered"
	// ReasonScaleDownReleased: the billing-aware scale-down let go of a node it held, with no
	// condition left to say why: its class turned the policy off, or the claim is going
	// (event).
	ReasonScaleDownReleased = "ScaleDownReleased"
)

// Reasons of Karpenter's NodeClaim Launched condition when CloudProvider.Create fails.
const (
	// ReasonAwaitingProviderID: the apply has not reported the machine's provider ID yet
	// (Karpenter calls Create again).
	ReasonAwaitingProviderID = "AwaitingProviderID"
	// ReasonFulfillmentConflict: a Fulfillment of the claim's name belongs to an earlier claim
	// and is being destroyed.
	ReasonFulfillmentConflict = "FulfillmentConflict"
	// ReasonNodeTypeNotFound: the chosen node type is no longer in the NodeClass.
	ReasonNodeTypeNotFound = "NodeTypeNotFound"
	// ReasonNodeClassReadinessUnknown: the NodeClass's checks have not answered yet (Ready is
	// Unknown); Karpenter calls Create again, where NodeClassNotReady would delete the claim.
	ReasonNodeClassReadinessUnknown = "NodeClassReadinessUnknown"
	// ReasonInvalidClaimName: the claim's name cannot name a state.
	ReasonInvalidClaimName = "InvalidClaimName"
	// ReasonLeasedMachineUnfit: the claim holds a pool machine (leased by an earlier Create
	// whose record was not written) of a node type that no longer fits it.
	ReasonLeasedMachineUnfit = "LeasedMachineUnfit"
	// ReasonOverlaysNotEvaluated: Karpenter has not evaluated the NodeOverlays of the claim's
	// NodePool yet (NodeOverlay gate on); Karpenter calls Create again.
	ReasonOverlaysNotEvaluated = "OverlaysNotEvaluated"
)

// Phases of a Fulfillment (status.phase): display values derived from the conditions; logic
// reads conditions, never a phase.
const (
	PhasePending      = "Pending"
	PhaseApplying     = "Applying"
	PhaseJoining      = "Joining"
	PhaseGating       = "Gating"
	PhaseDegraded     = "Degraded"
	PhaseInitializing = "Initializing"
	PhaseReady        = "Ready"
	PhaseFailed       = "Failed"
	PhaseDestroying   = "Destroying"
	PhaseDestroyed    = "Destroyed"
)

// Condition types of a TofuNodeClass: one per check, in the order they are checked. Ready is
// composed from them (StatusConditions) and carries the first failing check's reason and
// message; RegistrationWindow is a warning that does not count.
const (
	ConditionSpecValid   = "SpecValid"
	ConditionModuleValid = "ModuleValid"
	// ConditionBackendReady is True when the Secrets the backend and state encryption need
	// exist and hold usable values.
	ConditionBackendReady = "BackendReady"
	// ConditionCredentialsReady is True when every Secret in spec.credentials exists and its
	// keys are environment variable names.
	ConditionCredentialsReady = "CredentialsReady"
	// ConditionJoinPreflight is True when the cluster lets machines join with a bootstrap
	// token: public cluster-info, kubeadm's kube-system/kubeadm-config and kubelet-config
	// readable by bootstrap tokens, bootstrapper RBAC for CSRs and their auto-approval, and an
	// API server that authenticates bootstrap tokens.
	ConditionJoinPreflight = "JoinPreflight"
	// ConditionNodeTypesLaunchable is True when at least one node type can register within
	// Karpenter's 15-minute registration window.
	ConditionNodeTypesLaunchable = "NodeTypesLaunchable"
	// ConditionRegistrationWindow is False, as a warning, when some node type's apply
	// deadline and join timeout cannot fit Karpenter's 15-minute registration window; those
	// types are listed but not launchable. It is not part of Ready.
	ConditionRegistrationWindow = "RegistrationWindow"
	// ConditionCatalogReady (classes with spec.catalog) is True when the catalogue was read
	// within its refresh interval and the selection resolved to node types. A failed refresh
	// that keeps a last good list sets it False as a warning (Ready stays True, the list is
	// used); with no list to use, Ready is False with its reason.
	ConditionCatalogReady = "CatalogReady"
)

// ConditionTerminating is set on a TofuNodeClass being deleted: its finalizer keeps it while
// Fulfillments of it exist, so that their machines are destroyed with the settings they
// recorded and the class goes last. It is not part of Ready.
const ConditionTerminating = "Terminating"

// Reasons of the Terminating condition.
const (
	// ReasonClaimsRemaining: the class waits for its claims' machines to be destroyed; the
	// message says how many remain.
	ReasonClaimsRemaining = "ClaimsRemaining"
)

// classChecks are the conditions a TofuNodeClass's Ready is composed of, in order.
var classChecks = []string{ConditionSpecValid, ConditionModuleValid, ConditionBackendReady, ConditionCredentialsReady,
	ConditionJoinPreflight, ConditionNodeTypesLaunchable}

// ClassChecks returns the conditions a TofuNodeClass's Ready is composed of, in the order
// they are checked: the first that is not True gives Ready its reason and message.
func ClassChecks() []string { return append([]string(nil), classChecks...) }

// Reasons of the TofuNodeClass conditions. The join preflight's reasons are below.
const (
	ReasonInvalidSpec    = "InvalidSpec"
	ReasonModuleNotFound = "ModuleNotFound"
	ReasonInvalidModule  = "InvalidModule"
	// ReasonEncryptionKeyMissing: the Secret or key named by spec.backend.encryption.keySecretRef
	// does not exist.
	ReasonEncryptionKeyMissing = "EncryptionKeyMissing"
	// ReasonInvalidEncryptionKey: the passphrase is too short (pbkdf2 needs 16 characters).
	ReasonInvalidEncryptionKey = "InvalidEncryptionKey"
	// ReasonEncryptionKeyChanged: a claim's state was written with another passphrase than
	// its key Secret holds now (the key fingerprint it recorded differs); no run of it starts
	// until the passphrase it was written with is back (on a Fulfillment's Applied or
	// Destroyed).
	ReasonEncryptionKeyChanged = "EncryptionKeyChanged"
	// ReasonBackendSecretMissing: the Secret or key named by spec.backend.pg.connSecretRef
	// does not exist.
	ReasonBackendSecretMissing = "BackendSecretMissing"
	// ReasonInvalidBackend: the backend's settings do not fit together (type pg without pg).
	ReasonInvalidBackend = "InvalidBackend"
	// ReasonInvalidBackendSecret: the pg connection string cannot be used as it is (e.g. an
	// unencoded '#' in its password); the message says what, never the value.
	ReasonInvalidBackendSecret = "InvalidBackendSecret"
	// ReasonCredentialsMissing: a Secret named in spec.credentials does not exist.
	ReasonCredentialsMissing = "CredentialsMissing"
	// ReasonCredentialsNotOptedIn: a Secret named in spec.credentials is not labelled
	// LabelCredentials=true; only Secrets made for it may become a run's environment.
	ReasonCredentialsNotOptedIn = "CredentialsNotOptedIn"
	// ReasonInvalidCredentialsSecret: a key of such a Secret is no environment variable name,
	// or one that the fulfiller sets for tofu (TF_VAR_*, TF_LOG*, TF_CLI_ARGS*, TF_WORKSPACE,
	// ...: terraform-exec refuses them).
	ReasonInvalidCredentialsSecret = "InvalidCredentialsSecret"
	// ReasonInvalidCredentials: the class's family says its credentials do not work (a wrong
	// or revoked token, or one without a right it needs).
	ReasonInvalidCredentials = "InvalidCredentials"
	// ReasonCredentialsUnchecked: the family could not check the credentials (its API did
	// not answer); checked again soon.
	ReasonCredentialsUnchecked = "CredentialsUnchecked"
	// CatalogReady's reasons. ReasonCatalogResolved: read and selected.
	ReasonCatalogResolved = "CatalogResolved"
	// ReasonCatalogUnsupported: the class's family has no catalogue (or the class has none).
	ReasonCatalogUnsupported = "CatalogUnsupported"
	// ReasonCatalogRefreshFailed: the catalogue could not be read; the last good list, if
	// any, is kept.
	ReasonCatalogRefreshFailed = "CatalogRefreshFailed"
	// ReasonNoTypesSelected: spec.catalog.select matches no type of the catalogue.
	ReasonNoTypesSelected = "NoTypesSelected"
	// ReasonUnknownOverride: spec.catalog.overrides names a type the catalogue does not have.
	ReasonUnknownOverride = "UnknownOverride"
	// ReasonOrphanMachineDeleted (an event on the class): the orphan collector deleted a
	// machine of this cluster whose claim has no NodeClaim, Fulfillment or state.
	ReasonOrphanMachineDeleted = "OrphanMachineDeleted"
	// ReasonExceedsRegistrationWindow: a node type's apply deadline + join timeout is over
	// Karpenter's 15 minutes (RegistrationWindow; NodeTypesLaunchable when no type fits).
	ReasonExceedsRegistrationWindow = "ExceedsRegistrationWindow"
	// ReasonFits: every node type fits the registration window.
	ReasonFits = "Fits"
	// ReasonLaunchable: at least one node type fits the registration window.
	ReasonLaunchable = "Launchable"
)

// Conditions of a KubeVirt class (its family's checks, after the generic ones): the infra
// cluster's credentials may create VMs and Secrets in the VM namespace, and the storage class
// of its DataVolumes exists. Checked before any VM is created.
const (
	ConditionInfraAccessReady  = "InfraAccessReady"
	ConditionStorageClassReady = "StorageClassReady"
)

// Reasons of the KubeVirt class conditions.
const (
	// ReasonInfraKubeconfigMissing: the class's credentials name no infra cluster (no
	// KUBE_HOST, and no readable parameters.kubeconfig_path).
	ReasonInfraKubeconfigMissing = "InfraKubeconfigMissing"
	// ReasonInfraNamespaceForbidden: the infra credentials may not create what a VM needs in
	// its namespace (a SelfSubjectAccessReview says so); the message names the verb, resource
	// and namespace.
	ReasonInfraNamespaceForbidden = "InfraNamespaceForbidden"
	// ReasonStorageClassNotFound: a node type's storage_class does not exist on the infra
	// cluster.
	ReasonStorageClassNotFound = "StorageClassNotFound"
)

// Reasons of the JoinPreflight condition.
const (
	ReasonClusterInfoMissing   = "ClusterInfoMissing"
	ReasonClusterInfoNotPublic = "ClusterInfoNotPublic"
	// ReasonKubeadmConfigMissing: kube-system/kubeadm-config or kube-system/kubelet-config
	// does not exist, which `kubeadm join` reads right after discovery: the control plane was
	// not made by kubeadm (k3s, RKE2, a managed one).
	ReasonKubeadmConfigMissing = "KubeadmConfigMissing"
	// ReasonKubeadmConfigForbidden: bootstrap tokens may not read one of those ConfigMaps
	// (kubeadm's Roles kubeadm:nodes-kubeadm-config and kubeadm:kubelet-config grant it).
	ReasonKubeadmConfigForbidden     = "KubeadmConfigForbidden"
	ReasonBootstrapRBACMissing       = "BootstrapRBACMissing"
	ReasonCSRAutoApprovalMissing     = "CSRAutoApprovalMissing"
	ReasonBootstrapTokenAuthDisabled = "BootstrapTokenAuthDisabled"
)

// ReasonReady is the reason of a True Ready condition.
const ReasonReady = status.ConditionReady

// MaxMessageLength bounds every message the fulfiller writes for people: condition messages,
// event messages and run messages (RunError.Message). `kubectl get -o wide` shows them on one
// line.
const MaxMessageLength = message.MaxLength

// ShortMessage is s as a message: white space runs (newlines included) folded to single
// spaces, and cut to at most MaxMessageLength bytes on a rune boundary, a cut marked with an
// ellipsis.
func ShortMessage(s string) string { return message.Short(s) }

// ShortenTo is ShortMessage with another bound, for a part of a message.
func ShortenTo(s string, limit int) string { return message.ShortenTo(s, limit) }
