package engrams_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Import patterns are module-relative: "x" is package x, "x/..." is x and
// every package under it, "..." is every package. Two names stand for imports
// from outside the module: std (the standard library) and thirdparty.
const (
	std        = "std"
	thirdparty = "thirdparty"
)

// The package groups the rules name, each kept in one place.
var (
	// coordinatorSide is the coordinator and what is split out of it.
	coordinatorSide = []string{
		"internal/coordinator/...",
		"internal/tasks/...",
		"internal/gateway/...",
		"internal/harnessreg/...",
		"internal/imagejobs/...",
		"internal/secrets/...",
		"internal/profiles/...",
		"internal/egresslog/...",
		"internal/broker/...",
		"internal/automations/...",
		"internal/autorun/...",
		"internal/integrations/...",
		"internal/connector/...",
		"internal/intake/...",
		"internal/hookapp/...",
		"internal/slackapp/...",
		"internal/githubapp/...",
		"internal/linearapp/...",
	}
	// integrationPkgs plug into the integration seam (connector).
	integrationPkgs = []string{"internal/slackapp/...", "internal/githubapp/...", "internal/linearapp/...", "internal/hookapp/..."}
	storePkgs       = []string{"internal/store/..."} // the contract and its backends
	vmmPkgs         = []string{"internal/vmm/..."}
	guestPkgs       = []string{"internal/guest/...", "internal/guestinit/..."}
	// testOnly packages exist for tests; their doc comments say they are
	// imported only from _test.go files.
	testOnly = []string{
		"internal/e2e/...",
		"internal/fleetsim/...",
		"internal/modeltest/...",
		"internal/testutil/...",
		"internal/oidctest/...",
		"internal/image/imagetest/...",
		"internal/store/storetest/...",
		"internal/blob/blobtest/...",
		"internal/vmm/vmmtest/...",
		"internal/clienttest/...",
		"internal/slacktest/...",
		"internal/githubtest/...",
		"internal/lineartest/...",
		"internal/connector/connectortest/...",
	}
)

// layerRule constrains the direct imports of the non-test files of the
// packages matching from (minus those matching unless): none may match
// forbid, and if only is set, each must match one of only.
type layerRule struct {
	name   string
	from   []string
	unless []string
	forbid []string
	only   []string
	reason string
}

var layerRules = []layerRule{
	{
		name:   "clients-stay-clients",
		from:   []string{"internal/cli/...", "internal/client/...", "client/..."},
		forbid: concat(storePkgs, coordinatorSide, vmmPkgs, guestPkgs),
		reason: "the CLI and the Go client speak only the public API; server, host and guest code must not end up in them",
	},
	{
		name:   "api-without-store",
		from:   []string{"internal/api/..."},
		forbid: storePkgs,
		reason: "the API maps HTTP onto the coordinator; the database is behind the coordinator",
	},
	{
		name:   "host-without-coordinator",
		from:   []string{"internal/host/..."},
		forbid: concat(coordinatorSide, storePkgs, []string{"internal/api/...", "api/...", "internal/scheduler/...", "internal/lifecycle/...", "internal/hoststate/..."}),
		reason: "the host agent knows only the host link, its machines and the chunk store; coordinator decisions are not its business",
	},
	{
		name:   "guest-self-contained",
		from:   []string{"internal/guest/..."},
		only:   []string{std, thirdparty, "internal/guestapi/...", "internal/guest/..."},
		reason: "the guest daemon is built alone for the VM: it shares only its contract (guestapi) with the rest",
	},
	{
		name:   "pure-decisions",
		from:   []string{"internal/scheduler/...", "internal/lifecycle/...", "internal/hoststate/..."},
		only:   []string{std, "internal/domain/..."},
		reason: "placement and the session and host state machines are pure functions over domain types, table-tested without I/O",
	},
	{
		name:   "egresslog-over-the-store",
		from:   []string{"internal/egresslog/..."},
		only:   []string{std, thirdparty, "internal/domain/...", "internal/hostlink/...", "internal/store"},
		reason: "the egress log takes hosts' reports and serves reads over the store contract; no other service's code",
	},
	{
		name:   "domain-is-a-leaf",
		from:   []string{"internal/domain/..."},
		only:   []string{std},
		reason: "the domain types are the leaf every layer may import, so they import nothing",
	},
	{
		name:   "vmnet-host-side",
		from:   []string{"..."},
		unless: concat(vmmPkgs, []string{"internal/host/...", "cmd/..."}),
		forbid: []string{"internal/vmm/vmnet/..."},
		reason: "machine network namespaces are made by the host agent and handed to its VMM backends; nothing else touches them",
	},
	{
		name:   "pager-host-side",
		from:   []string{"..."},
		unless: []string{"internal/host/...", "cmd/..."},
		forbid: []string{"internal/host/pager/..."},
		reason: "lazily restored memory is served by the host agent to its VMMs; nothing else mounts it",
	},
	{
		name:   "pager-over-chunks",
		from:   []string{"internal/host/pager/..."},
		only:   []string{std, thirdparty, "internal/chunk"},
		reason: "the pager serves a manifest's chunks through a Source; it knows nothing of machines or sessions",
	},
	{
		name:   "vmnet-is-a-leaf",
		from:   []string{"internal/vmm/vmnet/..."},
		only:   []string{std, thirdparty},
		reason: "the namespace, TAP and rules of a machine need nothing of this module",
	},
	{
		name:   "ghapp-is-a-leaf",
		from:   []string{"internal/ghapp/..."},
		only:   []string{std},
		reason: "the GitHub App token minter is a client of GitHub's API alone, shared by secrets, tasks and wiring",
	},
	{
		name:   "ghapp-for-the-coordinator",
		from:   []string{"..."},
		unless: concat(coordinatorSide, []string{"internal/ghapp/...", "internal/server/...", "cmd/..."}),
		forbid: []string{"internal/ghapp/..."},
		reason: "GitHub App private keys are opened and used on the coordinator only, never on hosts or in guests",
	},
	{
		name:   "egress-for-the-host",
		from:   []string{"..."},
		unless: []string{"internal/egress/...", "internal/host/...", "cmd/..."},
		forbid: []string{"internal/egress/..."},
		reason: "the egress data plane (resolver, proxy) runs on the host, next to the machines it serves; only the host agent and cmd/ wire it",
	},
	{
		name:   "egress-over-interfaces",
		from:   []string{"internal/egress/..."},
		only:   []string{std, thirdparty, "internal/netpolicy/..."},
		reason: "the proxy and resolver ask the address policy through the small interfaces they declare (Names, Dialer, Addrs); nothing else of the module",
	},
	{
		name:   "netpolicy-is-a-leaf",
		from:   []string{"internal/netpolicy/..."},
		only:   []string{std},
		reason: "the address policy is shared by the coordinator, the host and the guest contract, so it imports nothing of theirs",
	},
	{
		name:   "access-is-pure",
		from:   []string{"internal/access/..."},
		only:   []string{std, "internal/domain/...", "api/apiv1"},
		reason: "who may do what is a decision over domain types and route names, table-tested without I/O; the store is reached through its small Keys interface",
	},
	{
		name:   "signin-is-small",
		from:   []string{"internal/signin/..."},
		only:   []string{std, thirdparty, "internal/domain/...", "internal/access/...", "api/apiv1"},
		reason: "sign-in maps a provider's identity to a member and mints a credential; it reaches the store through its small Store interface and is wired by internal/server",
	},
	{
		name:   "pricing-is-pure",
		from:   []string{"internal/pricing/..."},
		only:   []string{std, "internal/domain/..."},
		reason: "the price table is a pure reckoning over domain types, table-tested without I/O",
	},
	{
		name:   "automations-model-is-pure",
		from:   []string{"internal/automations"},
		only:   []string{std, thirdparty, "internal/domain/...", "api/apiv1"},
		reason: "the automation model (definitions, validation, run transitions) is pure rules, table-tested without I/O",
	},
	{
		name:   "dashboard-over-the-wire",
		from:   []string{"internal/dashboard/..."},
		only:   []string{std, thirdparty, "api/apiv1"},
		reason: "the dashboard is the built web app and its login codes; what it shows it reads through the public API, like any client",
	},
	{
		name:   "dashboard-for-the-server",
		from:   []string{"..."},
		unless: []string{"internal/dashboard/...", "internal/server/...", "cmd/..."},
		forbid: []string{"internal/dashboard/..."},
		reason: "the dashboard is served by a coordinator replica, wired in internal/server",
	},
	{
		name:   "test-only-stays-in-tests",
		from:   []string{"..."},
		unless: testOnly,
		forbid: testOnly,
		reason: "test harnesses and suites are imported only from _test.go files (or by each other)",
	},
	{
		name:   "autorun-for-the-api",
		from:   []string{"..."},
		unless: []string{"internal/autorun/...", "internal/api/...", "internal/server/...", "cmd/..."},
		forbid: []string{"internal/autorun/..."},
		reason: "automation runs are reached through the API and the delivery pipeline; the server wires them",
	},
	{
		name: "integrations-through-the-seam",
		from: integrationPkgs,
		only: []string{std, thirdparty, "internal/connector", "internal/domain/...", "internal/ghapp/...", "api/apiv1"},
		reason: "an integration plugs into the one seam (connector): it imports no other integration, neither the runner nor the pipeline " +
			"nor the store; the server wires it",
	},
	{
		name:   "the-seam-is-a-contract",
		from:   []string{"internal/connector"},
		only:   []string{std, "internal/domain/..."},
		reason: "the integration seam is a small contract and the checks written once for every integration; it depends on nothing of theirs",
	},
	{
		name:   "public-without-internal",
		from:   []string{"..."},
		unless: []string{"internal/...", "cmd/..."},
		forbid: []string{"internal/..."},
		reason: "public packages are importable by other modules, which cannot import internal/",
	},
}

// importEdge is one importer package → imported package, both module-relative.
type importEdge struct{ importer, imported string }

func concat(lists ...[]string) []string { return slices.Concat(lists...) }

// matchPattern reports whether the module-relative import path p (or std or
// thirdparty) matches pattern.
func matchPattern(pattern, p string) bool {
	switch {
	case pattern == "...":
		return p != std && p != thirdparty
	case strings.HasSuffix(pattern, "/..."):
		base := strings.TrimSuffix(pattern, "/...")
		return p == base || strings.HasPrefix(p, base+"/")
	default:
		return p == pattern
	}
}

func matchAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return matchPattern(pat, p) })
}

// classify maps an import path to its module-relative path, std or thirdparty.
func classify(module, imp string) string {
	if imp == module {
		return "."
	}
	if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
		return rel
	}
	if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
		return thirdparty
	}
	return std
}

// violation is one rule broken by one edge; file is the first non-test file
// with the import.
type violation struct {
	importEdge
	file string
	rule *layerRule
}

func (v violation) String() string {
	return fmt.Sprintf("%s imports %s (%s): rule %s: %s", v.importer, v.imported, v.file, v.rule.name, v.rule.reason)
}

// checkLayers returns every rule broken by the non-test files of st.
func checkLayers(st *sourceTree, rules []layerRule) []violation {
	var out []violation
	seen := map[string]bool{}
	for _, p := range st.pkgs {
		for _, f := range p.nonTest() {
			for _, spec := range f.ast.Imports {
				imp, _ := strconv.Unquote(spec.Path.Value)
				imported := classify(st.module, imp)
				for i := range rules {
					r := &rules[i]
					if !matchAny(r.from, p.dir) || matchAny(r.unless, p.dir) {
						continue
					}
					if !matchAny(r.forbid, imported) && (r.only == nil || matchAny(r.only, imported)) {
						continue
					}
					shown := imported
					if imported == std || imported == thirdparty {
						shown = imp
					}
					key := p.dir + " " + shown + " " + r.name
					if !seen[key] {
						seen[key] = true
						out = append(out, violation{importEdge{p.dir, shown}, f.path, r})
					}
				}
			}
		}
	}
	return out
}

// TestLayering checks the direct imports of every non-test file against
// layerRules.
func TestLayering(t *testing.T) {
	t.Parallel()
	for _, v := range checkLayers(loadTree(t), layerRules) {
		t.Errorf("forbidden import: %v", v)
	}
}

// TestLayeringRulesBite checks the checker itself on a made-up tree, so a
// broken matcher cannot pass TestLayering vacuously.
func TestLayeringRulesBite(t *testing.T) {
	t.Parallel()
	fake := func(dir string, imports ...string) *goPackage {
		f := &goFile{path: dir + "/x.go"}
		f.ast = parseImports(t, imports)
		return &goPackage{dir: dir, files: []*goFile{f}}
	}
	st := &sourceTree{module: "example.com/m", pkgs: []*goPackage{
		fake("internal/egresslog", "example.com/m/internal/store", "example.com/m/internal/coordinator", "golang.org/x/time/rate"),
		fake("internal/lifecycle", "example.com/m/internal/store", "example.com/m/internal/domain", "time"),
		fake("internal/hoststate", "example.com/m/internal/store", "example.com/m/internal/domain"),
		fake("internal/host/machines", "example.com/m/internal/hoststate"),
		fake("internal/domain", "github.com/google/uuid"),
		fake("internal/guest/sub", "example.com/m/internal/guestapi", "example.com/m/internal/guestinit", "golang.org/x/sys/unix"),
		fake("internal/cli", "example.com/m/internal/tasks/run"),
		fake("internal/host", "example.com/m/internal/hostlink", "example.com/m/internal/scheduler"),
		fake("api/apiv1", "example.com/m/internal/hostlink"),
		fake("internal/server", "example.com/m/internal/e2e"),
		fake("internal/image/imagetest", "example.com/m/internal/testutil"),
		fake("cmd/engrams", "example.com/m/internal/store", "example.com/m/internal/vmm/vmnet"),
		fake("internal/api", "example.com/m/internal/vmm/vmnet"),
		fake("internal/host/machines", "example.com/m/internal/vmm/vmnet"),
		fake("internal/vmm/vmnet", "example.com/m/internal/vmm", "github.com/google/nftables"),
		fake("internal/ghapp", "example.com/m/internal/domain", "crypto/rsa"),
		fake("internal/host/agent", "example.com/m/internal/ghapp"),
		fake("internal/tasks", "example.com/m/internal/ghapp"),
		fake("internal/tasks", "example.com/m/internal/egress"),
		fake("internal/host/relay", "example.com/m/internal/egress"),
		fake("internal/egress", "example.com/m/internal/hostlink", "example.com/m/internal/netpolicy", "github.com/miekg/dns"),
		fake("internal/netpolicy", "example.com/m/internal/domain", "net/netip"),
		fake("internal/tasks", "example.com/m/internal/autorun"),
		fake("internal/slackapp", "example.com/m/internal/githubapp", "example.com/m/internal/connector", "example.com/m/internal/domain"),
		fake("internal/linearapp", "example.com/m/internal/intake"),
		fake("internal/connector", "example.com/m/internal/store"),
	}}
	var got []string
	for _, v := range checkLayers(st, layerRules) {
		got = append(got, v.importer+" → "+v.imported+" "+v.rule.name)
	}
	want := []string{
		"internal/egresslog → internal/coordinator egresslog-over-the-store",
		"internal/lifecycle → internal/store pure-decisions",
		"internal/hoststate → internal/store pure-decisions",
		"internal/host/machines → internal/hoststate host-without-coordinator",
		"internal/domain → github.com/google/uuid domain-is-a-leaf",
		"internal/guest/sub → internal/guestinit guest-self-contained",
		"internal/cli → internal/tasks/run clients-stay-clients",
		"internal/host → internal/scheduler host-without-coordinator",
		"api/apiv1 → internal/hostlink public-without-internal",
		"internal/server → internal/e2e test-only-stays-in-tests",
		"internal/api → internal/vmm/vmnet vmnet-host-side",
		"internal/vmm/vmnet → internal/vmm vmnet-is-a-leaf",
		"internal/ghapp → internal/domain ghapp-is-a-leaf",
		"internal/host/agent → internal/ghapp ghapp-for-the-coordinator",
		"internal/tasks → internal/egress egress-for-the-host",
		"internal/egress → internal/hostlink egress-over-interfaces",
		"internal/netpolicy → internal/domain netpolicy-is-a-leaf",
		"internal/tasks → internal/autorun autorun-for-the-api",
		"internal/slackapp → internal/githubapp integrations-through-the-seam",
		"internal/linearapp → internal/intake integrations-through-the-seam",
		"internal/connector → internal/store the-seam-is-a-contract",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("violations of the made-up tree:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// blankImportsAllowed are the only blank imports of non-test files: each
// is a package with no other way in than its init.
var blankImportsAllowed = map[string]string{
	"internal/autorun github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite": "DBOS opens SQLite only through the driver its init registers",
}

// TestNoBlankImports: wiring is explicit, so a package is never imported
// only for what its init registers, except where blankImportsAllowed says.
func TestNoBlankImports(t *testing.T) {
	t.Parallel()
	seen := 0
	for _, p := range loadTree(t).pkgs {
		for _, f := range p.nonTest() {
			for _, spec := range f.ast.Imports {
				if spec.Name == nil || spec.Name.Name != "_" {
					continue
				}
				imp, _ := strconv.Unquote(spec.Path.Value)
				if imp == "embed" { // //go:embed into a string or []byte needs it
					continue
				}
				if _, ok := blankImportsAllowed[p.dir+" "+imp]; !ok {
					t.Errorf("%s: blank import of %s: import what you use, and wire it explicitly", f.path, imp)
				}
				seen++
			}
		}
	}
	if seen != len(blankImportsAllowed) {
		t.Errorf("%d allowed blank imports found, %d listed: drop the ones no longer there", seen, len(blankImportsAllowed))
	}
}

// parseImports parses a file that imports paths.
func parseImports(t *testing.T, paths []string) *ast.File {
	t.Helper()
	src := "package x\n"
	for _, p := range paths {
		src += "import " + strconv.Quote(p) + "\n"
	}
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
