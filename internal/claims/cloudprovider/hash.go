// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Drift annotations stamped on NodeClaims by Create and compared by IsDrifted.
const (
	AnnotationHash        = v1alpha1.Group + "/nodeclass-hash"
	AnnotationHashVersion = v1alpha1.Group + "/nodeclass-hash-version"
	// AnnotationHashParts holds the hash's parts (hashParts), so IsDrifted can say which
	// drifted.
	AnnotationHashParts = v1alpha1.Group + "/nodeclass-hash-parts"
	// HashVersion changes when the hash's inputs change meaning, so old claims are not
	// reported drifted by an upgrade of the fulfiller alone. v2: the backend and the token's
	// lifetime are no longer inputs. v3: a local module's content digest is one.
	HashVersion = "v3"
)

// nodeHash is the hash of what a node of this type was made from: its module and its version,
// the variables passed to it, bootstrap settings and the type's own definition. Only what
// changes a machine is in it. Offerings and prices are left out: they change what Karpenter
// buys next, not what a running node is. So is the backend (where states are, their
// encryption, the Secrets holding a connection string or a key), which each claim recorded
// at Create and keeps, and the bootstrap token's lifetime, which ends with the join. A local
// module's content digest is in it (as the class last resolved it), so editing the module's
// files drifts its nodes; a remote module's nodes drift when its source, so its ref, does,
// not when a git tag moves.
func nodeHash(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) string {
	return digest(hashInputsOf(nc, nt))
}

// hashInputs are nodeHash's inputs. Their JSON encoding is the hash's (v3): a field added
// here, renamed or reordered changes every claim's hash and needs a new HashVersion.
type hashInputs struct {
	Module    v1alpha1.ModuleSource
	Content   string `json:",omitempty"`
	Variables map[string]string
	Bootstrap v1alpha1.BootstrapSpec
	Type      v1alpha1.NodeType
}

func hashInputsOf(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) hashInputs {
	in := hashInputs{Module: nc.ModuleFor(nt), Variables: nc.Spec.Variables, Bootstrap: nc.Spec.Bootstrap, Type: *nt.DeepCopy()}
	in.Type.Module = nil // in Module: the class's module does not count for a type with its own
	if st, ok := nc.ModuleStatusOf(in.Module); ok && tfrunner.IsLocalSource(in.Module.Source) {
		in.Content = st.Digest
	}
	in.Bootstrap.TokenTTL = metav1.Duration{}
	if in.Bootstrap.Install == v1alpha1.InstallPackages {
		in.Bootstrap.Install = "" // the default: the same machines
	}
	in.Type.Offerings = nil
	in.Type.Deadlines = v1alpha1.StageDeadlines{} // how long stages may take does not change a node
	return in
}

// digest is the first 8 bytes of the SHA-256 of v's JSON encoding, in hex. Maps marshal
// with sorted keys, so it is stable.
func digest(v any) string {
	data, _ := json.Marshal(v)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// hashParts are nodeHash's inputs each digested alone, in the order of driftReasons, so that
// IsDrifted can name what drifted. Stamped on claims beside the whole hash, which alone
// decides whether a claim drifted.
func hashParts(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) string {
	in := hashInputsOf(nc, nt)
	digests := []string{digest(in.Module), digest(in.Content), digest(in.Variables), digest(in.Bootstrap), digest(in.Type)}
	parts := make([]string, len(driftReasons))
	for i, r := range driftReasons {
		parts[i] = r.part + "=" + digests[i]
	}
	return strings.Join(parts, ",")
}

// driftReasons name the parts of the hash, and what IsDrifted reports when each differs.
var driftReasons = []struct {
	part   string
	reason cloudprovider.DriftReason
}{
	{"module", "ModuleDrifted"},         // the module's source or version
	{"content", "ModuleContentDrifted"}, // a local module's files
	{"variables", "VariablesDrifted"},   // the class's variables
	{"bootstrap", "BootstrapDrifted"},   // the class's bootstrap settings
	{"type", "NodeTypeDrifted"},         // the node type's definition
}

// driftReason is the reason a claim whose whole hash differs drifted: the parts that differ
// between the parts it was stamped with and now's, joined with commas. A claim stamped
// without parts (created by an earlier fulfiller) or whose parts all agree (the whole hash
// covers them all, so that would be a change of encoding) drifted for NodeClassDrifted.
func driftReason(stamped, now string) cloudprovider.DriftReason {
	was, is := parseParts(stamped), parseParts(now)
	var reasons []string
	for _, r := range driftReasons {
		if was[r.part] != "" && was[r.part] != is[r.part] {
			reasons = append(reasons, string(r.reason))
		}
	}
	if len(was) != len(driftReasons) || len(reasons) == 0 {
		return ReasonNodeClassDrifted
	}
	return cloudprovider.DriftReason(strings.Join(reasons, ","))
}

// ReasonNodeClassDrifted is the drift reason when what drifted cannot be named.
const ReasonNodeClassDrifted cloudprovider.DriftReason = "NodeClassDrifted"

func parseParts(s string) map[string]string {
	parts := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && v != "" {
			parts[k] = v
		}
	}
	return parts
}
