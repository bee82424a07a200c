// Package check lints and renders the otel-rl Helm chart with Helm's own code (helm.sh/helm/v3's actions behind
// `helm lint --strict` and `helm template`), and decodes every rendered object strictly into its Go type from
// k8s.io/api and prometheus-operator's monitoring/v1: a field the type does not have is an error, as a field the
// API server would drop or refuse.
//
// `go test ./...` here checks each values case (chart_test.go); `go run ./cmd/render -out DIR` writes each case's
// manifest to DIR/<case>.yaml for tests/deploy/, which run the collector's `validate` and promtool on them.
package check

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/releaseutil"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// ReleaseName and Namespace of every rendering, as a user's `helm install otel-rl ... -n observability`.
const (
	ReleaseName = "otel-rl"
	Namespace   = "observability"
)

// Case is one way of installing the chart: values files (relative to deploy/helm/) and --set style overrides.
type Case struct {
	Name        string
	ValuesFiles []string
	Overrides   map[string]any
}

// Root returns the repository root (this file is deploy/helm/check/chart.go).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// ChartDir returns the chart's folder, deploy/helm/otel-rl.
func ChartDir() string { return filepath.Join(Root(), "deploy", "helm", "otel-rl") }

// Cases returns the chart's defaults and one case per values file of deploy/helm/values/, sorted by name.
func Cases() ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(Root(), "deploy", "helm", "values", "*.yaml"))
	if err != nil {
		return nil, err
	}
	cases := []Case{{Name: "default"}}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		cases = append(cases, Case{Name: name, ValuesFiles: []string{filepath.Join("values", filepath.Base(file))}})
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].Name < cases[j].Name })
	return cases, nil
}

// Values merges a case's values files and overrides as the helm command line does (-f, then --set).
func Values(c Case) (map[string]any, error) {
	options := values.Options{}
	for _, file := range c.ValuesFiles {
		options.ValueFiles = append(options.ValueFiles, filepath.Join(Root(), "deploy", "helm", file))
	}
	merged, err := options.MergeValues(getter.Providers{})
	if err != nil {
		return nil, err
	}
	return mergeMaps(merged, c.Overrides), nil
}

func mergeMaps(base, top map[string]any) map[string]any {
	out := make(map[string]any, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range top {
		if sub, ok := v.(map[string]any); ok {
			if current, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(current, sub)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// KubeVersion returns the Kubernetes release whose API types the objects decode into: k8s.io/api v0.X.Y (the
// version this module's go.mod selects) is Kubernetes v1.X.Y. Lint and Render give it to the chart as
// .Capabilities.KubeVersion (Helm's library default is v1.20).
func KubeVersion() (*chartutil.KubeVersion, error) {
	goMod, err := os.ReadFile(filepath.Join(Root(), "deploy", "helm", "check", "go.mod"))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(goMod), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "k8s.io/api" {
			return chartutil.ParseKubeVersion("v1." + strings.TrimPrefix(fields[1], "v0."))
		}
	}
	return nil, fmt.Errorf("go.mod requires no k8s.io/api")
}

// Lint runs `helm lint --strict` on the chart with the given values; every error or warning is returned.
func Lint(vals map[string]any) error {
	lint := action.NewLint()
	lint.Strict = true
	lint.Namespace = Namespace
	kubeVersion, err := KubeVersion()
	if err != nil {
		return err
	}
	lint.KubeVersion = kubeVersion
	result := lint.Run([]string{ChartDir()}, vals)
	if len(result.Errors) == 0 {
		return nil
	}
	messages := make([]string, 0, len(result.Errors))
	for _, err := range result.Errors {
		messages = append(messages, err.Error())
	}
	return fmt.Errorf("helm lint --strict: %s", strings.Join(messages, "; "))
}

// Render runs `helm template` (client-only install, dry run) and returns the manifest.
func Render(vals map[string]any) (string, error) {
	chart, err := loader.Load(ChartDir())
	if err != nil {
		return "", err
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = ReleaseName
	install.Namespace = Namespace
	if install.KubeVersion, err = KubeVersion(); err != nil {
		return "", err
	}
	release, err := install.Run(chart, vals)
	if err != nil {
		return "", err
	}
	return release.Manifest, nil
}

// Scheme holds every Go type a rendered object may decode into: Kubernetes' built-in APIs and monitoring/v1.
func Scheme() (*kruntime.Scheme, error) {
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := monitoringv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// Decode decodes each document of a manifest strictly into its registered Go type: an unknown kind, an unknown
// or duplicated field, or a value of the wrong type is an error naming the document.
func Decode(manifest string) ([]kruntime.Object, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	serializer := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	documents := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(documents))
	for key := range documents {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool { return manifestIndex(keys[i]) < manifestIndex(keys[j]) })
	objects := make([]kruntime.Object, 0, len(keys))
	for _, key := range keys {
		document := documents[key]
		object, _, err := serializer.Decode([]byte(document), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", sourceOf(document), err, document)
		}
		objects = append(objects, object)
	}
	return objects, nil
}

func manifestIndex(key string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(key, "manifest-"))
	return n
}

func sourceOf(document string) string {
	for _, line := range strings.Split(document, "\n") {
		if strings.HasPrefix(line, "# Source: ") {
			return strings.TrimPrefix(line, "# Source: ")
		}
	}
	return "document"
}

// WriteCases renders every case and writes its manifest to dir/<case>.yaml.
func WriteCases(dir string) error {
	cases, err := Cases()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range cases {
		vals, err := Values(c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		manifest, err := Render(vals)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.Name+".yaml"), []byte(manifest), 0o644); err != nil {
			return err
		}
	}
	return nil
}
