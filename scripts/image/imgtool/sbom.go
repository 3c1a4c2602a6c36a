package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// SPDX 2.3 JSON, the fields this SBOM uses.
type spdxDoc struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      spdxCreation   `json:"creationInfo"`
	Packages          []spdxPackage  `json:"packages"`
	Relationships     []spdxRelation `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo"`
	Supplier         string            `json:"supplier"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	LicenseConcluded string            `json:"licenseConcluded"`
	LicenseDeclared  string            `json:"licenseDeclared"`
	CopyrightText    string            `json:"copyrightText"`
	SourceInfo       string            `json:"sourceInfo,omitempty"`
	PrimaryPurpose   string            `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelation struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// purlVersion escapes what a package URL's version may not carry raw.
var purlVersion = strings.NewReplacer("%", "%25", "+", "%2B", ":", "%3A")

// buildSBOM describes the image (reference, digest) as containing every
// unpacked package, each with its .deb's sha256 and a Debian package URL.
// Everything in it derives from its inputs, so it is as reproducible as
// the image.
func buildSBOM(pkgs []pkg, ref, digest string, created time.Time) spdxDoc {
	h := sha256.New()
	fmt.Fprintln(h, ref, digest)
	for _, p := range pkgs {
		fmt.Fprintln(h, p.Name, p.Version, p.Arch, p.SHA256)
	}
	imageID := "SPDXRef-Image"
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              ref,
		DocumentNamespace: "https://github.com/bigfleet/libvirt-provider/spdx/" + hex.EncodeToString(h.Sum(nil)),
		CreationInfo: spdxCreation{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: bigfleet-imgtool", "Organization: BigFleet"},
		},
		Relationships: []spdxRelation{{"SPDXRef-DOCUMENT", "DESCRIBES", imageID}},
	}
	repo, tag, _ := strings.Cut(ref, ":")
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: repo, SPDXID: imageID, VersionInfo: tag, Supplier: "Organization: BigFleet",
		DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion,
		CopyrightText: noAssertion, PrimaryPurpose: "CONTAINER",
		Checksums: []spdxChecksum{{"SHA256", strings.TrimPrefix(digest, "sha256:")}},
	})
	for _, p := range pkgs {
		id := "SPDXRef-deb-" + spdxIDSafe(p.Name)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: p.Name, SPDXID: id, VersionInfo: p.Version, Supplier: "Organization: Debian",
			DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion,
			CopyrightText: noAssertion, SourceInfo: "Debian source package " + p.Source,
			PrimaryPurpose: "LIBRARY",
			Checksums:      []spdxChecksum{{"SHA256", p.SHA256}},
			ExternalRefs: []spdxExternalRef{{"PACKAGE-MANAGER", "purl",
				fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s&distro=debian-12", p.Name, purlVersion.Replace(p.Version), p.Arch)}},
		})
		doc.Relationships = append(doc.Relationships, spdxRelation{imageID, "CONTAINS", id})
	}
	return doc
}

// spdxIDSafe keeps letters, digits, '.' and '-' (SPDX identifiers).
func spdxIDSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '-'
	}, s)
}

func runSBOM(args []string) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	manifest := fs.String("manifest", "", "rootfs.sh's package manifest")
	image := fs.String("image", "", "pack's image.json (reference and digest)")
	epoch := fs.Int64("epoch", 0, "SOURCE_DATE_EPOCH")
	out := fs.String("out", "", "SPDX JSON file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pkgs, err := readManifest(*manifest)
	if err != nil {
		return err
	}
	var res Result
	b, err := os.ReadFile(*image)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", *image, err)
	}
	doc := buildSBOM(pkgs, res.Reference, res.Digest, time.Unix(*epoch, 0))
	b, err = json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(b, '\n'), 0o644)
}
