// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// A reader of OCI layouts written from the OCI image specification with the standard library
// alone, so that the image the builder (go-containerregistry) writes is read by a second,
// independent implementation: every blob's digest and size, and every layer's diff ID, are
// checked as they are read.

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Created      string `json:"created"`
	Config       struct {
		User       string            `json:"User"`
		Env        []string          `json:"Env"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// ociLayout is an OCI image layout folder.
type ociLayout string

func (l ociLayout) blobPath(digest string) (string, error) {
	alg, hexPart, ok := strings.Cut(digest, ":")
	if !ok || alg != "sha256" || len(hexPart) != 64 {
		return "", fmt.Errorf("digest %q is not sha256", digest)
	}
	return filepath.Join(string(l), "blobs", alg, hexPart), nil
}

// blob reads a blob and checks its digest and size.
func (l ociLayout) blob(d descriptor) ([]byte, error) {
	p, err := l.blobPath(d.Digest)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(data)) != d.Size {
		return nil, fmt.Errorf("blob %s: content does not match its descriptor (size %d, want %d)", d.Digest, len(data), d.Size)
	}
	return data, nil
}

func (l ociLayout) json(d descriptor, into any) error {
	data, err := l.blob(d)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

// top is the layout's index.json.
func (l ociLayout) top() (index, error) {
	var idx index
	data, err := os.ReadFile(filepath.Join(string(l), "index.json"))
	if err != nil {
		return idx, err
	}
	layoutFile, err := os.ReadFile(filepath.Join(string(l), "oci-layout"))
	if err != nil {
		return idx, fmt.Errorf("no oci-layout file: %w", err)
	}
	if !strings.Contains(string(layoutFile), `"imageLayoutVersion"`) {
		return idx, fmt.Errorf("oci-layout has no imageLayoutVersion: %s", layoutFile)
	}
	return idx, json.Unmarshal(data, &idx)
}

// image is one platform's manifest and config.
type image struct {
	desc     descriptor
	manifest manifest
	config   imageConfig
}

// extract unpacks the image's layers in order into dir, applying whiteouts, and checks each
// layer's diff ID against the config. It returns the regular files it wrote, by path in the
// image, with their sizes.
func (l ociLayout) extract(img image, dir string) (map[string]int64, error) {
	if len(img.manifest.Layers) != len(img.config.RootFS.DiffIDs) {
		return nil, fmt.Errorf("%d layers but %d diff IDs", len(img.manifest.Layers), len(img.config.RootFS.DiffIDs))
	}
	files := map[string]int64{}
	for i, layer := range img.manifest.Layers {
		data, err := l.blob(layer)
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", layer.Digest, err)
		}
		h := sha256.New()
		tr := tar.NewReader(io.TeeReader(zr, h))
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", layer.Digest, err)
			}
			name := path.Clean("/" + hdr.Name)
			target := filepath.Join(dir, filepath.FromSlash(name))
			base := path.Base(name)
			switch {
			case base == ".wh..wh..opq":
				entries, _ := os.ReadDir(filepath.Dir(target))
				for _, e := range entries {
					_ = os.RemoveAll(filepath.Join(filepath.Dir(target), e.Name()))
				}
				continue
			case strings.HasPrefix(base, ".wh."):
				gone := path.Join(path.Dir(name), strings.TrimPrefix(base, ".wh."))
				_ = os.RemoveAll(filepath.Join(dir, filepath.FromSlash(gone)))
				delete(files, gone)
				continue
			}
			switch hdr.Typeflag {
			case tar.TypeDir:
				if err := os.MkdirAll(target, 0o755); err != nil {
					return nil, err
				}
			case tar.TypeReg:
				if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
					return nil, err
				}
				f, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
				if err != nil {
					return nil, err
				}
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return nil, err
				}
				files[name] = hdr.Size
			case tar.TypeSymlink:
				if err := os.Symlink(hdr.Linkname, target); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("layer %s: %s has tar type %q, which the image should not hold", layer.Digest, name, hdr.Typeflag)
			}
			if hdr.Typeflag != tar.TypeSymlink {
				if err := os.Chown(target, hdr.Uid, hdr.Gid); err != nil {
					return nil, err
				}
				if err := os.Chmod(target, os.FileMode(hdr.Mode&0o777)|modeBits(hdr.Mode)); err != nil {
					return nil, err
				}
			}
		}
		if _, err := io.Copy(io.Discard, zr); err != nil {
			return nil, err
		}
		if diffID := "sha256:" + hex.EncodeToString(h.Sum(nil)); diffID != img.config.RootFS.DiffIDs[i] {
			return nil, fmt.Errorf("layer %s: diff ID %s, the config says %s", layer.Digest, diffID, img.config.RootFS.DiffIDs[i])
		}
	}
	return files, nil
}

func modeBits(m int64) os.FileMode {
	var mode os.FileMode
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	return mode
}
