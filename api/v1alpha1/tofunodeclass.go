// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"slices"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TofuNodeClass describes how to make nodes: the OpenTofu module, where its state lives, how
// machines join, and the node types Karpenter may choose from.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=tnc;tofunc,categories=karpenter
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Types",type=integer,JSONPath=`.status.nodeTypeCount`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Refreshed",type=date,JSONPath=`.status.catalog.refreshed`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type TofuNodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TofuNodeClassSpec   `json:"spec,omitempty"`
	Status TofuNodeClassStatus `json:"status,omitempty"`
}

// The backend's type, namespace and pg schema decide where existing claims' states are: they
// cannot change, also when spec.backend (or the field) was absent and took its default.
// (CEL escapes the reserved word namespace as __namespace__.)
// +kubebuilder:validation:XValidation:rule="(has(oldSelf.backend) && has(oldSelf.backend.type) ? oldSelf.backend.type : 'kubernetes') == (has(self.backend) && has(self.backend.type) ? self.backend.type : 'kubernetes')",message="spec.backend.type is immutable: the states of existing claims would be lost"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.backend) && has(oldSelf.backend.__namespace__) && size(oldSelf.backend.__namespace__) > 0 ? has(self.backend) && has(self.backend.__namespace__) && self.backend.__namespace__ == oldSelf.backend.__namespace__ : !(has(self.backend) && has(self.backend.__namespace__) && size(self.backend.__namespace__) > 0)",message="spec.backend.namespace is immutable: the states of existing claims would be lost"
// +kubebuilder:validation:XValidation:rule="(has(oldSelf.backend) && has(oldSelf.backend.pg) && has(oldSelf.backend.pg.schemaName) ? oldSelf.backend.pg.schemaName : 'fulfiller') == (has(self.backend) && has(self.backend.pg) && has(self.backend.pg.schemaName) ? self.backend.pg.schemaName : 'fulfiller')",message="spec.backend.pg.schemaName is immutable: the states of existing claims would be lost"
// +kubebuilder:validation:XValidation:rule="has(self.nodeTypes) != has(self.catalog)",message="set exactly one of nodeTypes and catalog"
// The families whose machines the fulfiller knows the billing of (internal/providers: hcloud by
// the started hour, robot by the month of 730 hours); a class of another family states its own.
// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || self.scaleDown.policy != 'AtPaidPeriodEnd' || has(self.scaleDown.billingPeriod) || (has(self.family) && self.family in ['hcloud', 'robot'])",message="scaleDown.policy AtPaidPeriodEnd needs scaleDown.billingPeriod: only the hcloud and robot families say how their machines are billed"
// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || has(self.scaleDown.billingPeriod) || !has(self.scaleDown.margin) || !has(self.family) || !(self.family in ['hcloud', 'robot']) || duration(self.scaleDown.margin) < (self.family == 'hcloud' ? duration('1h') : duration('730h'))",message="scaleDown.margin must be shorter than the family's billing period (hcloud 1h, robot 730h)"
type TofuNodeClassSpec struct {
	// Family names the kind of infrastructure the module builds, so that the fulfiller can
	// use what it knows about it: its error rules, its catalogue of node types, the machines
	// it can list for orphan collection. sim: modules/sim; hcloud: Hetzner Cloud servers;
	// kubevirt: KubeVirt VirtualMachines; robot: Hetzner Robot dedicated servers. Empty: a
	// generic module, classified by the generic error rules only.
	// +kubebuilder:validation:Enum="";sim;hcloud;kubevirt;robot
	// +optional
	Family string `json:"family,omitempty"`
	// Robot is the pool of a robot class: its servers and how they are activated.
	// +optional
	Robot *RobotPool `json:"robot,omitempty"`
	// Module is the OpenTofu module every node type uses unless it names its own.
	Module ModuleSource `json:"module"`
	// ErrorRules classify a generic module's failures (a class without a family; a family
	// has its own rules): the first rule matching an error of a run gives its failure class,
	// before the generic rules. An InsufficientCapacity failure marks the offering
	// unavailable and Karpenter re-plans elsewhere, as for a family's capacity errors.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ErrorRules []ErrorRule `json:"errorRules,omitempty"`
	// Backend is where each claim's state lives and is locked. One state per NodeClaim.
	// +optional
	Backend Backend `json:"backend,omitempty"`
	// Credentials name Secrets in the fulfiller's namespace whose keys become the environment
	// of every tofu run of the class (e.g. HCLOUD_TOKEN for the hcloud provider). Values travel
	// only in the run's request (a Secret, or a 0600 file), never in a Job spec or argv.
	// +optional
	Credentials []CredentialsSource `json:"credentials,omitempty"`
	// Variables are passed to the module in its `parameters` map, for every node type.
	// +optional
	Variables map[string]string `json:"variables,omitempty"`
	// Bootstrap configures how machines join the cluster.
	Bootstrap BootstrapSpec `json:"bootstrap"`
	// NodeTypes are the instance types Karpenter may launch with this class (the static
	// catalogue). Set either nodeTypes or catalog.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	// +optional
	NodeTypes []NodeType `json:"nodeTypes,omitempty"`
	// Catalog selects the node types from the family's live catalogue (its cloud's server
	// types and prices, refreshed on an interval) instead of listing them in nodeTypes. The
	// resolved types are in status.catalog.
	// +optional
	Catalog *Catalog `json:"catalog,omitempty"`
	// Readiness declares the gates (taints under readiness.k8s.io/) a node passes before pods
	// may land on it, and what happens when one misses its deadline.
	// +optional
	Readiness ReadinessSpec `json:"readiness,omitempty"`
	// ScaleDown says when a node Karpenter would consolidate as empty goes. Unset: as soon as
	// Karpenter consolidates it (policy Immediate).
	// +optional
	ScaleDown *ScaleDown `json:"scaleDown,omitempty"`
}

// ScaleDownPolicy says when a node Karpenter would consolidate as empty goes.
// +kubebuilder:validation:Enum=Immediate;AtPaidPeriodEnd
type ScaleDownPolicy string

const (
	// ScaleDownImmediate: as soon as Karpenter consolidates it (the default).
	ScaleDownImmediate ScaleDownPolicy = "Immediate"
	// ScaleDownAtPaidPeriodEnd: the node is kept (karpenter.sh/do-not-disrupt on its Node)
	// until margin before the end of the billing period it is in, so that it takes new pods
	// instead of a new machine being bought within a period already paid for. A drifted,
	// expired or unhealthy node is never kept.
	ScaleDownAtPaidPeriodEnd ScaleDownPolicy = "AtPaidPeriodEnd"
)

// ScaleDown is a class's billing-aware scale-down.
// +kubebuilder:validation:XValidation:rule="!has(self.billingPeriod) || duration(self.billingPeriod) >= duration('1m')",message="scaleDown.billingPeriod must be at least 1m"
// +kubebuilder:validation:XValidation:rule="!has(self.margin) || duration(self.margin) >= duration('0s')",message="scaleDown.margin must not be negative"
// +kubebuilder:validation:XValidation:rule="!has(self.margin) || !has(self.billingPeriod) || duration(self.margin) < duration(self.billingPeriod)",message="scaleDown.margin must be shorter than scaleDown.billingPeriod"
type ScaleDown struct {
	// Policy: Immediate (Karpenter's consolidation as it is) or AtPaidPeriodEnd.
	Policy ScaleDownPolicy `json:"policy"`
	// BillingPeriod is how the class's machines are billed: a machine pays each started
	// period, counted from when its apply created it. Default: its family's (hcloud: 1h, a
	// server is billed by the started hour; robot: 730h, a month). A class of another family
	// (or none) must set it to use AtPaidPeriodEnd.
	// +optional
	BillingPeriod *metav1.Duration `json:"billingPeriod,omitempty"`
	// Margin is how long before its paid period ends a kept node is let go, so that Karpenter
	// has drained and deleted it before the next period starts (default 5m).
	// +optional
	Margin *metav1.Duration `json:"margin,omitempty"`
}

type ModuleSource struct {
	// Source is the module: an absolute path (a folder in the fulfiller's image and its
	// runners'), or any remote source OpenTofu accepts in a module block, fetched by tofu
	// itself (`tofu get`) with the class's credentials as its environment: a git repository
	// (git::https://host/org/repo.git//subdir?ref=v1.2.0, git::ssh://...), an HTTP(S)
	// archive, an OCI module package (oci://registry/repository?tag=v1.2.0), a module
	// registry address (host[:port]/namespace/name/system, its token as TF_TOKEN_<host> in
	// the credentials) with Version as its version constraint. The class resolves it
	// (status.modules: a git ref's commit, a registry constraint's exact version, the
	// content's digest) and checks the module contract before any machine is bought; each
	// claim records what it resolved to and every run of the claim, its destroy included,
	// uses exactly that.
	// +kubebuilder:validation:MinLength=1
	Source string `json:"source"`
	// Version is in the drift hash, so changing it rolls the nodes. For a registry source it
	// is the version constraint tofu resolves (">= 1.2, < 2", "~> 1.2", "1.2.3"; empty: the
	// newest release): a claim records the exact version, and a newer release that matches
	// is taken by claims made after the class resolves it again, without drifting running
	// nodes. For a folder it is a release label only. A git, HTTP or OCI source takes none
	// (ModuleValid is False): its release is in the source (?ref=, ?tag=).
	// +optional
	Version string `json:"version,omitempty"`
}

// ErrorRule maps an error of a generic module's runs to a failure class.
// +kubebuilder:validation:XValidation:rule="has(self.code) != has(self.pattern)",message="set exactly one of code and pattern"
type ErrorRule struct {
	// Code is an error code the provider or the cloud API prints (resource_unavailable),
	// matched as a whole word in an error diagnostic's summary and detail (for a local-exec
	// provisioner, in what the command printed).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Code string `json:"code,omitempty"`
	// Pattern is an RE2 regular expression matched against the same text.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Pattern string `json:"pattern,omitempty"`
	// Class is the failure class the run gets.
	// +kubebuilder:validation:Enum=InsufficientCapacity;QuotaExceeded;InvalidCredentials;TransientError;InvalidModule
	Class string `json:"class"`
}

// ModuleStatus is what a module source resolved to when the class last resolved it.
type ModuleStatus struct {
	// Source as the spec names it.
	Source string `json:"source"`
	// Constraint is the version constraint a registry source was resolved with (the
	// spec's version).
	// +optional
	Constraint string `json:"constraint,omitempty"`
	// Pinned is the source claims created now fetch: a git source with its ref replaced by
	// Commit; the source itself otherwise (a registry source at Version).
	// +optional
	Pinned string `json:"pinned,omitempty"`
	// Commit is the git commit a git source's ref resolved to.
	// +optional
	Commit string `json:"commit,omitempty"`
	// Version is the exact version a registry source's constraint resolved to: claims
	// created now fetch this release.
	// +optional
	Version string `json:"version,omitempty"`
	// Digest identifies the module's content ("sha256:..."): its files' names, contents and
	// executable bits. A local module's digest is in the drift hash, so editing its files
	// drifts its nodes; a remote one's nodes drift when the source (its ref) changes.
	// +optional
	Digest string `json:"digest,omitempty"`
	// Resolved is when the source was last fetched and read successfully.
	// +optional
	Resolved *metav1.Time `json:"resolved,omitempty"`
}

// BackendType names an OpenTofu state backend.
// +kubebuilder:validation:Enum=kubernetes;pg
type BackendType string

const BackendKubernetes BackendType = "kubernetes"

// +kubebuilder:validation:XValidation:rule="self.type != 'pg' || has(self.pg)",message="backend type pg needs spec.backend.pg"
type Backend struct {
	// Type of the backend. The kubernetes backend keeps each state in a Secret and locks it
	// with a Lease; pg keeps it in a PostgreSQL table (spec.backend.pg). The API server
	// stores its default, kubernetes (TypeOrDefault), so that it cannot change afterwards.
	// It cannot change (TofuNodeClassSpec's rules).
	// +kubebuilder:default=kubernetes
	// +optional
	Type BackendType `json:"type,omitempty"`
	// Namespace for the kubernetes backend's Secrets and Leases (default: the fulfiller's state
	// namespace). It cannot change (TofuNodeClassSpec's rules).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// PG configures the pg backend (type pg).
	// +optional
	PG *PGBackendSpec `json:"pg,omitempty"`
	// Encryption encrypts every claim's state and plans with a key from a Secret.
	// +optional
	Encryption *BackendEncryption `json:"encryption,omitempty"`
}

type BootstrapSpec struct {
	// APIServerEndpoint is the host:port machines join (kubeadm's apiServerEndpoint).
	// +kubebuilder:validation:MinLength=1
	APIServerEndpoint string `json:"apiServerEndpoint"`
	// TokenTTL is how long a claim's bootstrap token is valid (default 30m). It is deleted as
	// soon as the node registers.
	// +optional
	TokenTTL metav1.Duration `json:"tokenTTL,omitempty"`
	// CRISocket is the container runtime socket kubeadm configures.
	// +optional
	CRISocket string `json:"criSocket,omitempty"`
	// KubernetesVersion the machines run (vX.Y.Z), recorded in the drift hash: the version
	// `install: packages` installs, and the kubeadm whose configuration API the join is
	// written for. Empty: the API server's version when a claim's user data is rendered.
	// +kubebuilder:validation:Pattern=`^(v[0-9]+\.[0-9]+\.[0-9]+)?$`
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Install says how a machine gets its node software: containerd, runc, the CNI plugins,
	// kubelet, kubeadm and kubectl. packages (the default): the user data installs them at
	// boot on a stock Ubuntu 22.04, Ubuntu 24.04 or Debian 12 image, amd64 or arm64, from the
	// Kubernetes community packages of kubernetesVersion's minor (pkgs.k8s.io) and
	// containerd's and runc's releases, which adds a few minutes to every boot; it is
	// idempotent, so an image that has them already only configures them. none: the image
	// has them (a pre-baked image, images/ in the repository), the fast path.
	// +kubebuilder:validation:Enum=packages;none
	// +optional
	Install InstallMode `json:"install,omitempty"`
	// KubeletExtraArgs are passed to every machine's kubelet (kubeadm's kubeletExtraArgs);
	// a node type's own args of the same name win. provider-id, node-labels and
	// register-with-taints are the fulfiller's.
	// +optional
	KubeletExtraArgs []KubeletArg `json:"kubeletExtraArgs,omitempty"`
	// ExtraCloudConfig is a #cloud-config document merged into the rendered user data: its
	// write_files come after the fulfiller's (a file at the fulfiller's path is an error), its
	// runcmd before `kubeadm join`, its other keys as they are (a key the fulfiller sets is an
	// error).
	// +optional
	ExtraCloudConfig string `json:"extraCloudConfig,omitempty"`
}

// InstallMode says how a machine gets its node software (BootstrapSpec.Install).
type InstallMode string

const (
	// InstallPackages installs the node software at boot on a stock image.
	InstallPackages InstallMode = "packages"
	// InstallNone expects an image that has it.
	InstallNone InstallMode = "none"
)

// InstallOrDefault is the install mode, packages when unset.
func (b BootstrapSpec) InstallOrDefault() InstallMode {
	if b.Install == "" {
		return InstallPackages
	}
	return b.Install
}

type NodeType struct {
	// Name is the value of node.kubernetes.io/instance-type.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Capacity of the machine: cpu, memory, pods, ephemeral-storage, extended resources (GPUs).
	Capacity corev1.ResourceList `json:"capacity"`
	// Overhead is reserved for the kubelet and the container runtime: the machine's kubelet
	// gets it as --kube-reserved (cpu, memory, ephemeral-storage, pid). A node's allocatable
	// is capacity - overhead - systemReserved - the hard eviction thresholds, computed the
	// same way by Karpenter and by the kubelet.
	// +optional
	Overhead corev1.ResourceList `json:"overhead,omitempty"`
	// SystemReserved is reserved for the operating system's daemons: --system-reserved
	// (cpu, memory, ephemeral-storage, pid).
	// +optional
	SystemReserved corev1.ResourceList `json:"systemReserved,omitempty"`
	// EvictionHard are the kubelet's hard eviction thresholds (--eviction-hard), by signal
	// (memory.available, nodefs.available, imagefs.available, ...), each a quantity ("100Mi")
	// or a percentage of capacity ("10%"). memory.available and nodefs.available count
	// against allocatable memory and ephemeral-storage. When unset, the kubelet's defaults:
	// memory.available 100Mi, nodefs.available 10%, nodefs.inodesFree 5%, imagefs.available
	// 15%, imagefs.inodesFree 5%. Set, it replaces them all, as the kubelet's flag does.
	// +optional
	EvictionHard map[string]string `json:"evictionHard,omitempty"`
	// Architecture (kubernetes.io/arch); default amd64.
	// +optional
	Architecture string `json:"architecture,omitempty"`
	// Labels are added to nodes of this type.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Offerings are where and at which price the type can be launched.
	// +kubebuilder:validation:MinItems=1
	Offerings []Offering `json:"offerings"`
	// Variables are merged over the class's variables in the module's `parameters`.
	// +optional
	Variables map[string]string `json:"variables,omitempty"`
	// Module, when set, is this type's own module instead of the class's (spec.module): it
	// is resolved, checked and pinned like the class's, and used for this type's claims only.
	// +optional
	Module *ModuleSource `json:"module,omitempty"`
	// ProviderIDTemplate, when set, makes the provider ID known before the apply: `{name}` is
	// replaced by the node name (e.g. `kubevirt://{name}`); it must contain it, or every claim
	// would get the same ID. Otherwise the module's provider_id output is awaited.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || self.contains('{name}')",message="providerIDTemplate must contain {name}: every claim would get the same provider ID"
	// +optional
	ProviderIDTemplate string `json:"providerIDTemplate,omitempty"`
	// ProviderIDFrom says how a machine learns its provider ID when no template makes it
	// known before the apply (Hetzner Cloud assigns server IDs at creation): its cloud-init
	// reads the instance ID from a metadata URL before `kubeadm join` and sets the kubelet's
	// provider ID to prefix + ID, with no cloud-controller-manager. Without a template this
	// is what happens, with Hetzner Cloud's defaults unless set here. The module's
	// provider_id output must give the same ID.
	// +optional
	ProviderIDFrom *ProviderIDFrom `json:"providerIDFrom,omitempty"`
	// JoinTimeout is how long a machine of this type may take from a finished apply until its
	// Node registers. Past it the claim is replaced and the machine destroyed. It must leave
	// room in Karpenter's fixed 15-minute registration window. Default 10m.
	// +optional
	JoinTimeout *metav1.Duration `json:"joinTimeout,omitempty"`
	// Deadlines of the apply and of each readiness gate (see StageDeadlines).
	// +optional
	Deadlines StageDeadlines `json:"deadlines,omitempty"`
	// KubeletExtraArgs of this type, over the class's.
	// +optional
	KubeletExtraArgs []KubeletArg `json:"kubeletExtraArgs,omitempty"`
	// UserDataLimit is the most user data this type's cloud accepts (Hetzner Cloud: 32Ki).
	// Over it the user data is gzipped and base64-encoded (cloud-init decompresses it);
	// still over, the claim fails with UserDataTooLarge and no machine is created. No limit
	// when unset.
	// +optional
	UserDataLimit *resource.Quantity `json:"userDataLimit,omitempty"`
}

// ProviderIDFrom is where a machine reads its instance ID, and how it makes a provider ID of
// it.
type ProviderIDFrom struct {
	// MetadataURL answers the machine's instance ID as plain text (default Hetzner Cloud's,
	// http://169.254.169.254/hetzner/v1/metadata/instance-id).
	// +kubebuilder:validation:Pattern=`^https?://[^'"\\$ ]+$`
	// +optional
	MetadataURL string `json:"metadataURL,omitempty"`
	// Prefix goes before the ID: the provider ID is prefix + ID (default hcloud://).
	// +kubebuilder:validation:Pattern=`^[^'"\\$|&, ]+$`
	// +optional
	Prefix string `json:"prefix,omitempty"`
}

type Offering struct {
	// Zone (topology.kubernetes.io/zone).
	// +kubebuilder:validation:MinLength=1
	Zone string `json:"zone"`
	// CapacityType (karpenter.sh/capacity-type); default on-demand.
	// +kubebuilder:validation:Enum=on-demand;spot;reserved
	// +optional
	CapacityType string `json:"capacityType,omitempty"`
	// Price per hour, a decimal string such as "0.0119".
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Price string `json:"price"`
	// Unavailable marks an offering that cannot be launched now (it is still listed).
	// +optional
	Unavailable bool `json:"unavailable,omitempty"`
}

type TofuNodeClassStatus struct {
	// Conditions: Ready is False with a reason when the class cannot launch nodes.
	// +optional
	Conditions []status.Condition `json:"conditions,omitempty"`
	// NodeTypeCount is the number of node types offered.
	// +optional
	NodeTypeCount int `json:"nodeTypeCount,omitempty"`
	// Hash of the spec that launched nodes are compared against for drift.
	// +optional
	Hash string `json:"hash,omitempty"`
	// Catalog is what the class's catalogue resolved to (classes with spec.catalog only).
	// +optional
	Catalog *CatalogStatus `json:"catalog,omitempty"`
	// Modules are the class's module sources as last resolved, re-resolved on an interval
	// (the controller's --module-refresh-interval). A failed refresh keeps the last good
	// resolution.
	// +listType=map
	// +listMapKey=source
	// +optional
	Modules []ModuleStatus `json:"modules,omitempty"`
}

// ModuleFor is the module of node type nt: its own, else the class's.
func (in *TofuNodeClass) ModuleFor(nt *NodeType) ModuleSource {
	if nt != nil && nt.Module != nil {
		return *nt.Module
	}
	return in.Spec.Module
}

// ModuleSources are the distinct modules of the class (source and version): its own, then
// its node types' in their order.
func (in *TofuNodeClass) ModuleSources() []ModuleSource {
	sources := []ModuleSource{in.Spec.Module}
	types := in.NodeTypes()
	for i := range types {
		if m := types[i].Module; m != nil && !slices.Contains(sources, *m) {
			sources = append(sources, *m)
		}
	}
	return sources
}

// ModuleStatusFor is the status of the module source, if the class resolved it (the first, for
// a registry source resolved with several version constraints).
func (in *TofuNodeClass) ModuleStatusFor(source string) (*ModuleStatus, bool) {
	for i := range in.Status.Modules {
		if in.Status.Modules[i].Source == source {
			return &in.Status.Modules[i], true
		}
	}
	return nil, false
}

// ModuleStatusOf is the status of the module, if the class resolved it: the status of its
// source, and for a registry source (a status with a Version) resolved with its version
// constraint.
func (in *TofuNodeClass) ModuleStatusOf(m ModuleSource) (*ModuleStatus, bool) {
	for i := range in.Status.Modules {
		st := &in.Status.Modules[i]
		if st.Source == m.Source && (st.Version == "" || st.Constraint == m.Version) {
			return st, true
		}
	}
	return nil, false
}

// Catalog selects node types from the class's family's catalogue.
type Catalog struct {
	// Select: a type of the catalogue is offered when it matches at least one selector (all
	// of a selector's fields must match).
	// +kubebuilder:validation:MinItems=1
	Select []TypeSelector `json:"select"`
	// Zones limits the offerings to these zones (Hetzner Cloud: locations such as fsn1);
	// empty: every zone the catalogue offers.
	// +optional
	Zones []string `json:"zones,omitempty"`
	// Prices: net (default) or gross (with VAT) hourly prices.
	// +kubebuilder:validation:Enum=net;gross
	// +optional
	Prices string `json:"prices,omitempty"`
	// RefreshInterval is how often the catalogue is read again (default 10m, at least 1m).
	// +optional
	RefreshInterval *metav1.Duration `json:"refreshInterval,omitempty"`
	// Overrides change selected types: their price, overhead, labels and variables.
	// +listType=map
	// +listMapKey=name
	// +optional
	Overrides []TypeOverride `json:"overrides,omitempty"`
}

// TypeSelector matches types of a catalogue. Empty fields match every type.
type TypeSelector struct {
	// Names of types (cx23, cpx32, ...).
	// +optional
	Names []string `json:"names,omitempty"`
	// Series are product lines (Hetzner Cloud: cx, cpx, ccx, cax).
	// +optional
	Series []string `json:"series,omitempty"`
	// CPU is shared or dedicated.
	// +kubebuilder:validation:Enum=shared;dedicated
	// +optional
	CPU string `json:"cpu,omitempty"`
	// Architecture (kubernetes.io/arch): amd64 or arm64.
	// +kubebuilder:validation:Enum=amd64;arm64
	// +optional
	Architecture string `json:"architecture,omitempty"`
	// MinCPU and MaxCPU bound the number of cores.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinCPU *int32 `json:"minCPU,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxCPU *int32 `json:"maxCPU,omitempty"`
	// MinMemory and MaxMemory bound the memory (e.g. 4Gi).
	// +optional
	MinMemory *resource.Quantity `json:"minMemory,omitempty"`
	// +optional
	MaxMemory *resource.Quantity `json:"maxMemory,omitempty"`
}

// TypeOverride changes one type of the catalogue.
type TypeOverride struct {
	// Name of the type; it must be in the catalogue.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Price per hour in every zone, instead of the catalogue's.
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +optional
	Price string `json:"price,omitempty"`
	// Overhead replaces the type's overhead (--kube-reserved).
	// +optional
	Overhead corev1.ResourceList `json:"overhead,omitempty"`
	// Labels are added to nodes of the type.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Variables are merged over the class's variables for the type.
	// +optional
	Variables map[string]string `json:"variables,omitempty"`
}

// CatalogStatus is the last good list a class's catalogue resolved to. A failed refresh
// keeps it (CatalogReady says so).
type CatalogStatus struct {
	// NodeTypes are the selected types, with overrides applied.
	// +kubebuilder:validation:MaxItems=256
	// +optional
	NodeTypes []NodeType `json:"nodeTypes,omitempty"`
	// Version changes whenever anything in NodeTypes does.
	// +optional
	Version string `json:"version,omitempty"`
	// Refreshed is when the catalogue was last read successfully.
	// +optional
	Refreshed *metav1.Time `json:"refreshed,omitempty"`
	// ObservedGeneration is the class generation NodeTypes were selected for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// StatusConditions: Ready is composed of the class's checks (ClassChecks), and the status
// controller gives it the reason and message of the first check that fails, so `kubectl get
// tofunodeclasses` says what is wrong.
func (in *TofuNodeClass) StatusConditions(opts ...status.ForOption) status.ConditionSet {
	return status.NewReadyConditions(classChecks...).For(in, opts...)
}

func (in *TofuNodeClass) GetConditions() []status.Condition { return in.Status.Conditions }

func (in *TofuNodeClass) SetConditions(conditions []status.Condition) {
	in.Status.Conditions = conditions
}

// NodeTypes are the class's node types: spec.nodeTypes, or for a class with a catalogue the
// last good list it resolved to (none before the first).
func (in *TofuNodeClass) NodeTypes() []NodeType {
	if in.Spec.Catalog == nil {
		return in.Spec.NodeTypes
	}
	if in.Status.Catalog == nil {
		return nil
	}
	return in.Status.Catalog.NodeTypes
}

// NodeType returns the named node type.
func (in *TofuNodeClass) NodeType(name string) (*NodeType, bool) {
	types := in.NodeTypes()
	for i := range types {
		if types[i].Name == name {
			return &types[i], true
		}
	}
	return nil, false
}

// +kubebuilder:object:root=true
type TofuNodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TofuNodeClass `json:"items"`
}
