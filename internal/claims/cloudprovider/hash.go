// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// Drift annotations stamped on NodeClaims by Create and compared by IsDrifted.
const (
	AnnotationHash        = v1alpha1.Group + "/nodeclass-hash"
	AnnotationHashVersion = v1alpha1.Group + "/nodeclass-hash-version"
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
	in := struct {
		Module    v1alpha1.ModuleSource
		Content   string `json:",omitempty"`
		Variables map[string]string
		Bootstrap v1alpha1.BootstrapSpec
		Type      v1alpha1.NodeType
	}{Module: nc.ModuleFor(nt), Variables: nc.Spec.Variables, Bootstrap: nc.Spec.Bootstrap, Type: *nt.DeepCopy()}
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
	data, _ := json.Marshal(in)                   // maps marshal with sorted keys: stable
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
