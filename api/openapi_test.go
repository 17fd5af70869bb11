package api_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/engrams/engrams/api"
	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/automations"
)

// doc is the part of an OpenAPI document the tests look at.
type doc struct {
	OpenAPI    string                          `yaml:"openapi"`
	Security   []map[string][]string           `yaml:"security"`
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Schemas         map[string]schema `yaml:"schemas"`
		SecuritySchemes map[string]struct {
			Type   string `yaml:"type"`
			Scheme string `yaml:"scheme"`
		} `yaml:"securitySchemes"`
	} `yaml:"components"`
}

type schema struct {
	Type       string            `yaml:"type"`
	Format     string            `yaml:"format"`
	Ref        string            `yaml:"$ref"`
	Encoding   string            `yaml:"contentEncoding"`
	Required   []string          `yaml:"required"`
	Properties map[string]schema `yaml:"properties"`
	Items      *schema           `yaml:"items"`
	Additional *schema           `yaml:"additionalProperties"`
}

type operation struct {
	OperationID string                 `yaml:"operationId"`
	Security    *[]map[string][]string `yaml:"security"`
	Responses   map[string]yaml.Node   `yaml:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

func load(t *testing.T) doc {
	t.Helper()
	var d doc
	if err := yaml.Unmarshal(api.OpenAPI(), &d); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(d.OpenAPI, "3.1.") {
		t.Fatalf("openapi = %q, want 3.1.x", d.OpenAPI)
	}
	return d
}

// sourceRoutes reads every Route* constant from package apiv1's source, so
// a route added there without a matching operation here fails the test.
func sourceRoutes(t *testing.T) map[string]string {
	t.Helper()
	dir := "apiv1"
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Route") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s is not a string literal", id.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					routes[id.Name] = v
				}
			}
		}
	}
	if len(routes) == 0 {
		t.Fatal("found no Route constants in apiv1")
	}
	return routes
}

// opKey turns a ServeMux pattern "GET /v1/x/{id}" into "get /v1/x/{id}".
func opKey(t *testing.T, pattern string) string {
	t.Helper()
	method, path, ok := strings.Cut(pattern, " ")
	if !ok || strings.Contains(path, "...}") || strings.Contains(path, "{$}") {
		t.Fatalf("route %q: want \"METHOD /path\" without wildcards OpenAPI cannot express", pattern)
	}
	return strings.ToLower(method) + " " + path
}

func TestRoutesMatchPaths(t *testing.T) {
	t.Parallel()
	d := load(t)
	routes := sourceRoutes(t)

	// The compiled constants must agree with the parsed ones (guards the
	// source parsing itself).
	compiled := map[string]string{
		"RouteVersion": apiv1.RouteVersion, "RouteCreateSession": apiv1.RouteCreateSession,
		"RouteListSessions": apiv1.RouteListSessions, "RouteGetSession": apiv1.RouteGetSession,
		"RouteDeleteSession": apiv1.RouteDeleteSession, "RouteExec": apiv1.RouteExec,
		"RouteExecWS": apiv1.RouteExecWS, "RouteFileGet": apiv1.RouteFileGet,
		"RouteFilePut": apiv1.RouteFilePut, "RouteFileList": apiv1.RouteFileList,
		"RouteFileStat": apiv1.RouteFileStat, "RouteEvents": apiv1.RouteEvents,
		"RouteListHosts": apiv1.RouteListHosts, "RouteGetHost": apiv1.RouteGetHost,
		"RouteDrainHost": apiv1.RouteDrainHost, "RouteUndrainHost": apiv1.RouteUndrainHost, "RouteCreateHost": apiv1.RouteCreateHost,
		"RouteDisableHost": apiv1.RouteDisableHost, "RouteEnableHost": apiv1.RouteEnableHost, "RouteDeleteHost": apiv1.RouteDeleteHost,
		"RouteCreateToken": apiv1.RouteCreateToken, "RouteListTokens": apiv1.RouteListTokens,
		"RouteRevokeToken": apiv1.RouteRevokeToken, "RouteOpenAPI": apiv1.RouteOpenAPI,
		"RouteSuspend": apiv1.RouteSuspend, "RouteResume": apiv1.RouteResume,
		"RouteSnapshot": apiv1.RouteSnapshot, "RouteOutboxPut": apiv1.RouteOutboxPut,
		"RouteOutboxList": apiv1.RouteOutboxList, "RouteEnableImage": apiv1.RouteEnableImage,
		"RouteListImages": apiv1.RouteListImages, "RouteGetImage": apiv1.RouteGetImage,
		"RouteDisableImage": apiv1.RouteDisableImage, "RouteRefreshImage": apiv1.RouteRefreshImage,
		"RouteImageJobs": apiv1.RouteImageJobs, "RouteGetImageJob": apiv1.RouteGetImageJob,
		"RouteDashboardLogin": apiv1.RouteDashboardLogin, "RoutePreviewReceipt": apiv1.RoutePreviewReceipt, "RouteChanges": apiv1.RouteChanges,
		"RouteDeleteHarness":    apiv1.RouteDeleteHarness,
		"RouteCreateAutomation": apiv1.RouteCreateAutomation, "RouteListAutomations": apiv1.RouteListAutomations,
		"RouteGetAutomation": apiv1.RouteGetAutomation, "RouteUpdateAutomation": apiv1.RouteUpdateAutomation,
		"RouteDeleteAutomation": apiv1.RouteDeleteAutomation, "RouteEnableAutomation": apiv1.RouteEnableAutomation,
		"RouteDisableAutomation": apiv1.RouteDisableAutomation, "RouteRotateHookSecret": apiv1.RouteRotateHookSecret,
		"RouteStartRun": apiv1.RouteStartRun, "RouteListRuns": apiv1.RouteListRuns, "RouteGetRun": apiv1.RouteGetRun,
		"RouteCancelRun": apiv1.RouteCancelRun, "RouteHook": apiv1.RouteHook,
		"RouteAddIntegration": apiv1.RouteAddIntegration, "RouteListIntegrations": apiv1.RouteListIntegrations,
		"RouteRemoveIntegration": apiv1.RouteRemoveIntegration, "RouteSlackEvents": apiv1.RouteSlackEvents,
		"RouteGitHubEvents": apiv1.RouteGitHubEvents, "RouteLinearEvents": apiv1.RouteLinearEvents,
		"RouteTaskPR": apiv1.RouteTaskPR, "RouteListBuiltins": apiv1.RouteListBuiltins,
	}
	for name, v := range compiled {
		if routes[name] != v {
			t.Errorf("parsed %s = %q, compiled %q", name, routes[name], v)
		}
	}

	want := map[string]string{} // op key -> constant name
	for name, pattern := range routes {
		want[opKey(t, pattern)] = name
	}
	got := map[string]bool{}
	for path, item := range d.Paths {
		for method := range item {
			if slices.Contains(httpMethods, method) {
				got[method+" "+path] = true
			}
		}
	}
	for key, name := range want {
		if !got[key] {
			t.Errorf("apiv1.%s (%s) has no operation in openapi.yaml", name, key)
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("openapi.yaml operation %s has no apiv1.Route constant", key)
		}
	}
}

func TestOperations(t *testing.T) {
	t.Parallel()
	d := load(t)
	if s := d.Components.SecuritySchemes["bearer"]; s.Type != "http" || s.Scheme != "bearer" {
		t.Errorf("securitySchemes.bearer = %+v, want http bearer", s)
	}
	if len(d.Security) != 1 || d.Security[0]["bearer"] == nil {
		t.Errorf("global security = %v, want bearer", d.Security)
	}
	public := map[string]bool{opKey(t, apiv1.RouteVersion): true, opKey(t, apiv1.RouteOpenAPI): true, opKey(t, apiv1.RouteDashboardLogin): true,
		opKey(t, apiv1.RouteHook): true, opKey(t, apiv1.RouteSlackEvents): true,
		opKey(t, apiv1.RouteGitHubEvents): true, opKey(t, apiv1.RouteLinearEvents): true,
		opKey(t, apiv1.RouteAuthConfig): true, opKey(t, apiv1.RouteOIDCStart): true, opKey(t, apiv1.RouteOIDCCallback): true,
		opKey(t, apiv1.RouteCLISignIn): true, opKey(t, apiv1.RouteSignOut): true}
	ids := map[string]string{}
	for path, item := range d.Paths {
		for method, node := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			key := method + " " + path
			var op operation
			if err := node.Decode(&op); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", key)
			} else if other, dup := ids[op.OperationID]; dup {
				t.Errorf("%s: operationId %q also used by %s", key, op.OperationID, other)
			}
			ids[op.OperationID] = key
			if _, ok := op.Responses["default"]; !ok {
				t.Errorf("%s: no default (error) response", key)
			}
			isPublic := op.Security != nil && len(*op.Security) == 0
			if isPublic != public[key] {
				t.Errorf("%s: public = %v, want %v", key, isPublic, public[key])
			}
		}
	}
}

// TestSpecialStreams checks the stream media types and the answers the
// clients rely on.
func TestSpecialStreams(t *testing.T) {
	t.Parallel()
	d := load(t)
	tests := []struct {
		route, status, contains string
	}{
		{apiv1.RouteEvents, "200", "text/event-stream"},
		{apiv1.RouteEvents, "", "Last-Event-ID"},
		{apiv1.RouteEvents, "", "`id:` is the event's `seq`"},
		{apiv1.RouteExec, "200", "application/x-ndjson"},
		{apiv1.RouteChanges, "200", "text/event-stream"},
		{apiv1.RouteChanges, "", "coalesced"},
		{apiv1.RouteExecWS, "101", "Switching protocols"},
		{apiv1.RouteExecWS, "", "channel byte"},
		{apiv1.RouteExecWS, "", "stdin_close"},
		// The snapshot and outbox answers the client decodes, and the
		// semantics their callers rely on.
		{apiv1.RouteSuspend, "200", "#/components/schemas/Session"},
		{apiv1.RouteSuspend, "", "content-addressed chunks"},
		{apiv1.RouteSuspend, "", "wait=false"},
		{apiv1.RouteResume, "200", "#/components/schemas/Session"},
		{apiv1.RouteResume, "", "on an idle session resumes it"},
		{apiv1.RouteSnapshot, "201", "#/components/schemas/Snapshot"},
		{apiv1.RouteOutboxPut, "202", "#/components/schemas/OutboxItem"},
		{apiv1.RouteOutboxPut, "", "exactly once"},
		{apiv1.RouteOutboxPut, "", "`durable`"},
		{apiv1.RouteOutboxList, "200", "#/components/schemas/OutboxList"},
		// Image jobs: the answers the client decodes, and what callers rely on.
		{apiv1.RouteEnableImage, "202", "#/components/schemas/ImageJobResponse"},
		{apiv1.RouteEnableImage, "200", "#/components/schemas/ImageJobResponse"},
		{apiv1.RouteEnableImage, "", "never returned"},
		{apiv1.RouteRefreshImage, "202", "#/components/schemas/ImageJobResponse"},
		{apiv1.RouteGetImageJob, "200", "#/components/schemas/ImageJob"},
		{apiv1.RouteImageJobs, "200", "#/components/schemas/ImageJobList"},
		{apiv1.RouteListImages, "", "all"},
		{apiv1.RouteDisableImage, "200", "#/components/schemas/Image"},
	}
	for _, tt := range tests {
		key := opKey(t, tt.route)
		method, path, _ := strings.Cut(key, " ")
		node := d.Paths[path][method]
		out, err := yaml.Marshal(&node)
		if err != nil {
			t.Fatal(err)
		}
		text := string(out)
		if tt.status != "" {
			var op operation
			if err := node.Decode(&op); err != nil {
				t.Fatal(err)
			}
			resp, ok := op.Responses[tt.status]
			if !ok {
				t.Errorf("%s: no %s response", key, tt.status)
				continue
			}
			b, _ := yaml.Marshal(&resp)
			text = string(b)
		}
		if !strings.Contains(text, tt.contains) {
			t.Errorf("%s %s: does not mention %q", key, tt.status, tt.contains)
		}
	}
}

// TestSchemasMatchTypes checks every component schema's properties against
// the JSON fields of the Go type it describes, including each property's
// JSON type.
func TestSchemasMatchTypes(t *testing.T) {
	t.Parallel()
	d := load(t)
	types := schemaTypes()
	enums := map[string]bool{"SessionState": true}
	byType := map[reflect.Type]string{}
	for name, typ := range types {
		byType[typ] = name
	}
	for name := range d.Components.Schemas {
		if types[name] == nil && !enums[name] {
			t.Errorf("schema %s maps to no Go type; add it to this test", name)
		}
	}
	for name, typ := range types {
		s, ok := d.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s for %v", name, typ)
			continue
		}
		checkSchema(t, name, s, typ, byType, enums)
	}
}

// schemaTypes maps each component schema to the Go type it describes.
func schemaTypes() map[string]reflect.Type {
	out := coreSchemaTypes()
	maps.Copy(out, taskSchemaTypes())
	maps.Copy(out, automationSchemaTypes())
	maps.Copy(out, peopleSchemaTypes())
	return out
}

// peopleSchemaTypes maps the members, audit and who-am-I schemas.
func peopleSchemaTypes() map[string]reflect.Type {
	return map[string]reflect.Type{
		"WhoAmI":              reflect.TypeFor[apiv1.WhoAmI](),
		"Identity":            reflect.TypeFor[apiv1.Identity](),
		"IdentityList":        reflect.TypeFor[apiv1.IdentityList](),
		"LinkIdentityRequest": reflect.TypeFor[apiv1.LinkIdentityRequest](),
		"IdentityLink":        reflect.TypeFor[apiv1.IdentityLink](),
		"Grant":               reflect.TypeFor[apiv1.Grant](),
		"Member":              reflect.TypeFor[apiv1.Member](),
		"MemberList":          reflect.TypeFor[apiv1.MemberList](),
		"AddMemberRequest":    reflect.TypeFor[apiv1.AddMemberRequest](),
		"SetMemberRequest":    reflect.TypeFor[apiv1.SetMemberRequest](),
		"AuditEvent":          reflect.TypeFor[apiv1.AuditEvent](),
		"AuditList":           reflect.TypeFor[apiv1.AuditList](),
	}
}

// taskSchemaTypes maps the task schemas.
func taskSchemaTypes() map[string]reflect.Type {
	return map[string]reflect.Type{
		"StartTaskRequest": reflect.TypeFor[apiv1.StartTaskRequest](),
		"SendTaskRequest":  reflect.TypeFor[apiv1.SendTaskRequest](),
		"Task":             reflect.TypeFor[apiv1.Task](),
		"TaskList":         reflect.TypeFor[apiv1.TaskList](),
		"TaskEvent":        reflect.TypeFor[apiv1.TaskEvent](),
		"Money":            reflect.TypeFor[apiv1.Money](),
		"TaskUsage":        reflect.TypeFor[apiv1.TaskUsage](),
		"TurnUsage":        reflect.TypeFor[apiv1.TurnUsage](),
		"TaskDiff":         reflect.TypeFor[apiv1.TaskDiff](),
		"RepoDiff":         reflect.TypeFor[apiv1.RepoDiff](),
	}
}

func coreSchemaTypes() map[string]reflect.Type {
	return map[string]reflect.Type{
		"Error":                 reflect.TypeFor[apiv1.Error](),
		"Version":               reflect.TypeFor[apiv1.Version](),
		"DashboardLoginRequest": reflect.TypeFor[apiv1.DashboardLoginRequest](),
		"PreviewReceiptRequest": reflect.TypeFor[apiv1.PreviewReceiptRequest](),
		"ReceiptPreview":        reflect.TypeFor[apiv1.ReceiptPreview](),
		"SignedIn":              reflect.TypeFor[apiv1.SignedIn](),
		"AuthConfig":            reflect.TypeFor[apiv1.AuthConfig](),
		"CLISignInRequest":      reflect.TypeFor[apiv1.CLISignInRequest](),
		"SessionSpec":           reflect.TypeFor[apiv1.SessionSpec](),
		"CreateSessionRequest":  reflect.TypeFor[apiv1.CreateSessionRequest](),
		"Session":               reflect.TypeFor[apiv1.Session](),
		"SuspendOutcome":        reflect.TypeFor[apiv1.SuspendOutcome](),
		"Op":                    reflect.TypeFor[apiv1.Op](),
		"Snapshot":              reflect.TypeFor[apiv1.Snapshot](),
		"OutboxRequest":         reflect.TypeFor[apiv1.OutboxRequest](),
		"OutboxItem":            reflect.TypeFor[apiv1.OutboxItem](),
		"OutboxList":            reflect.TypeFor[apiv1.OutboxList](),
		"EgressEvent":           reflect.TypeFor[apiv1.EgressEvent](),
		"EgressList":            reflect.TypeFor[apiv1.EgressList](),
		"SessionList":           reflect.TypeFor[apiv1.SessionList](),
		"ExecRequest":           reflect.TypeFor[apiv1.ExecRequest](),
		"ExecFrame":             reflect.TypeFor[apiv1.ExecFrame](),
		"Event":                 reflect.TypeFor[apiv1.Event](),
		"Host":                  reflect.TypeFor[apiv1.Host](),
		"HostList":              reflect.TypeFor[apiv1.HostList](),
		"CreateHostRequest":     reflect.TypeFor[apiv1.CreateHostRequest](),
		"CreateHostResponse":    reflect.TypeFor[apiv1.CreateHostResponse](),
		"CreateTokenRequest":    reflect.TypeFor[apiv1.CreateTokenRequest](),
		"Token":                 reflect.TypeFor[apiv1.Token](),
		"CreateTokenResponse":   reflect.TypeFor[apiv1.CreateTokenResponse](),
		"TokenList":             reflect.TypeFor[apiv1.TokenList](),
		"Facts":                 reflect.TypeFor[apiv1.HostFacts](),
		"BackendFacts":          reflect.TypeFor[apiv1.BackendFacts](),
		"Capacity":              reflect.TypeFor[apiv1.Capacity](),
		"FileInfo":              reflect.TypeFor[apiv1.FileInfo](),
		"ExecStart":             reflect.TypeFor[apiv1.ExecStart](),
		"Control":               reflect.TypeFor[apiv1.ExecControl](),
		"EnableImageRequest":    reflect.TypeFor[apiv1.EnableImageRequest](),
		"RegistryAuth":          reflect.TypeFor[apiv1.RegistryAuth](),
		"Image":                 reflect.TypeFor[apiv1.Image](),
		"ImageConfig":           reflect.TypeFor[apiv1.ImageConfig](),
		"ImageJob":              reflect.TypeFor[apiv1.ImageJob](),
		"ImageJobResponse":      reflect.TypeFor[apiv1.ImageJobResponse](),
		"ImageList":             reflect.TypeFor[apiv1.ImageList](),
		"ImageDefaults":         reflect.TypeFor[apiv1.ImageDefaults](),
		"ImageJobList":          reflect.TypeFor[apiv1.ImageJobList](),
		// Agents (harnesses, secrets, profiles).
		"BuildHarnessRequest":  reflect.TypeFor[apiv1.BuildHarnessRequest](),
		"Harness":              reflect.TypeFor[apiv1.Harness](),
		"HarnessCredential":    reflect.TypeFor[apiv1.HarnessCredential](),
		"HarnessRequires":      reflect.TypeFor[apiv1.HarnessRequires](),
		"HarnessList":          reflect.TypeFor[apiv1.HarnessList](),
		"SecretMeta":           reflect.TypeFor[apiv1.SecretMeta](),
		"CreateSecretRequest":  reflect.TypeFor[apiv1.CreateSecretRequest](),
		"Secret":               reflect.TypeFor[apiv1.Secret](),
		"SecretList":           reflect.TypeFor[apiv1.SecretList](),
		"ProfileSpec":          reflect.TypeFor[apiv1.ProfileSpec](),
		"ProfileRepo":          reflect.TypeFor[apiv1.ProfileRepo](),
		"ProfileApp":           reflect.TypeFor[apiv1.ProfileApp](),
		"Profile":              reflect.TypeFor[apiv1.Profile](),
		"CreateProfileRequest": reflect.TypeFor[apiv1.CreateProfileRequest](),
		"UpdateProfileRequest": reflect.TypeFor[apiv1.UpdateProfileRequest](),
		"ProfileResponse":      reflect.TypeFor[apiv1.ProfileResponse](),
		"ProfileList":          reflect.TypeFor[apiv1.ProfileList](),
		"Receipt":              reflect.TypeFor[apiv1.Receipt](),
		"ReceiptImage":         reflect.TypeFor[apiv1.ReceiptImage](),
		"ReceiptHarness":       reflect.TypeFor[apiv1.ReceiptHarness](),
		"ReceiptHost":          reflect.TypeFor[apiv1.ReceiptHost](),
		"ReceiptEnforcement":   reflect.TypeFor[apiv1.ReceiptEnforcement](),
		"ReceiptCredential":    reflect.TypeFor[apiv1.ReceiptCredential](),
		"ReceiptSkill":         reflect.TypeFor[apiv1.ReceiptSkill](),
		"ReceiptApp":           reflect.TypeFor[apiv1.ReceiptApp](),
	}
}

// automationSchemaTypes maps the automation schemas: the wire types, and
// the definition's own (the API carries it as JSON; the model package
// defines it).
func automationSchemaTypes() map[string]reflect.Type {
	return map[string]reflect.Type{
		"CreateAutomationRequest": reflect.TypeFor[apiv1.CreateAutomationRequest](),
		"UpdateAutomationRequest": reflect.TypeFor[apiv1.UpdateAutomationRequest](),
		"Automation":              reflect.TypeFor[apiv1.Automation](),
		"AutomationResponse":      reflect.TypeFor[apiv1.AutomationResponse](),
		"AutomationList":          reflect.TypeFor[apiv1.AutomationList](),
		"StartRunRequest":         reflect.TypeFor[apiv1.StartRunRequest](),
		"Run":                     reflect.TypeFor[apiv1.Run](),
		"RunResponse":             reflect.TypeFor[apiv1.RunResponse](),
		"RunDetail":               reflect.TypeFor[apiv1.RunDetail](),
		"RunList":                 reflect.TypeFor[apiv1.RunList](),
		"RunStep":                 reflect.TypeFor[apiv1.RunStep](),
		"AutomationDefinition":    reflect.TypeFor[automations.Definition](),
		"AutomationTrigger":       reflect.TypeFor[automations.Trigger](),
		"AutomationInput":         reflect.TypeFor[automations.Input](),
		"AutomationBlock":         reflect.TypeFor[automations.Block](),
		"AutomationSettings":      reflect.TypeFor[automations.Settings](),
		"AddIntegrationRequest":   reflect.TypeFor[apiv1.AddIntegrationRequest](),
		"Integration":             reflect.TypeFor[apiv1.Integration](),
		"IntegrationList":         reflect.TypeFor[apiv1.IntegrationList](),
		"TaskPRRequest":           reflect.TypeFor[apiv1.TaskPRRequest](),
		"TaskPR":                  reflect.TypeFor[apiv1.TaskPR](),
		"Builtin":                 reflect.TypeFor[apiv1.Builtin](),
		"BuiltinList":             reflect.TypeFor[apiv1.BuiltinList](),
	}
}

// checkSchema compares schema s (named name) with the JSON fields of typ:
// the same properties, required ones among them, each of the right type.
func checkSchema(t *testing.T, name string, s schema, typ reflect.Type, byType map[reflect.Type]string, enums map[string]bool) {
	t.Helper()
	fields := jsonFields(typ)
	var got, want []string
	for p := range s.Properties {
		got = append(got, p)
	}
	for f := range fields {
		want = append(want, f)
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("schema %s properties = %v, Go %v fields = %v", name, got, typ, want)
		return
	}
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; !ok {
			t.Errorf("schema %s requires unknown property %s", name, r)
		}
	}
	for p, ps := range s.Properties {
		if msg := checkType(ps, fields[p].Type, byType, enums); msg != "" {
			t.Errorf("schema %s.%s: %s", name, p, msg)
		}
	}
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// checkType says how ps differs from what encoding/json makes of typ.
func checkType(ps schema, typ reflect.Type, byType map[reflect.Type]string, enums map[string]bool) string {
	if typ.Kind() == reflect.Pointer { // an optional object: encoding/json writes what it points to
		typ = typ.Elem()
	}
	if ps.Ref != "" {
		ref := strings.TrimPrefix(ps.Ref, "#/components/schemas/")
		if enums[ref] && typ.Kind() == reflect.String {
			return ""
		}
		if byType[typ] != ref {
			return "refers to " + ref + ", Go type is " + typ.String()
		}
		return ""
	}
	want := ""
	switch {
	case typ == rawType || typ.Kind() == reflect.Interface:
		if ps.Type != "" {
			return typ.String() + " must have no type, has " + ps.Type
		}
		return ""
	case typ == timeType:
		if ps.Format != "date-time" {
			return "time.Time needs format date-time"
		}
		want = "string"
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Uint8:
		if ps.Encoding != "base64" {
			return "[]byte needs contentEncoding base64"
		}
		want = "string"
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		want = "integer"
	case typ.Kind() == reflect.Float32 || typ.Kind() == reflect.Float64:
		want = "number"
	case typ.Kind() == reflect.Slice:
		if ps.Items == nil {
			return "array needs items"
		}
		if msg := checkType(*ps.Items, typ.Elem(), byType, enums); msg != "" {
			return "items: " + msg
		}
		want = "array"
	case typ.Kind() == reflect.Map:
		if ps.Additional == nil {
			return "map needs additionalProperties"
		}
		if msg := checkType(*ps.Additional, typ.Elem(), byType, enums); msg != "" {
			return "additionalProperties: " + msg
		}
		want = "object"
	default:
		return "Go type " + typ.String() + " needs a $ref"
	}
	if ps.Type != want {
		return "type " + ps.Type + ", want " + want + " for Go " + typ.String()
	}
	return ""
}

// jsonFields lists the JSON object keys encoding/json writes for typ,
// flattening embedded structs.
func jsonFields(typ reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

// TestRefsResolve checks every $ref points at a component that exists.
func TestRefsResolve(t *testing.T) {
	t.Parallel()
	var root yaml.Node
	if err := yaml.Unmarshal(api.OpenAPI(), &root); err != nil {
		t.Fatal(err)
	}
	var comps map[string]map[string]yaml.Node
	var whole struct {
		Components map[string]map[string]yaml.Node `yaml:"components"`
	}
	if err := root.Decode(&whole); err != nil {
		t.Fatal(err)
	}
	comps = whole.Components
	refs := 0
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value != "$ref" {
				continue
			}
			refs++
			parts := strings.Split(strings.TrimPrefix(n.Content[i+1].Value, "#/components/"), "/")
			if len(parts) != 2 {
				t.Errorf("$ref %q: want #/components/KIND/NAME", n.Content[i+1].Value)
				continue
			}
			if _, ok := comps[parts[0]][parts[1]]; !ok {
				t.Errorf("$ref %q resolves to nothing", n.Content[i+1].Value)
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	if refs == 0 {
		t.Fatal("found no $ref at all")
	}
}

// logs page by sequence number, not by cursor: they are followed.
var listShapeExempt = map[string]string{"EgressList": "a followed log, paged by its next sequence number"}

// listExtras are the properties a list may carry beside its page: facts
// about the whole list, never a second array of its items.
var listExtras = map[string][]string{"ImageList": {"defaults"}}

// TestListsHaveOneShape: every list schema is {items, next_cursor}, both
// required, so every list route answers one shape.
func TestListsHaveOneShape(t *testing.T) {
	t.Parallel()
	d := load(t)
	lists := 0
	for name, s := range d.Components.Schemas {
		if !strings.HasSuffix(name, "List") || listShapeExempt[name] != "" {
			continue
		}
		lists++
		items, next := s.Properties["items"], s.Properties["next_cursor"]
		if len(s.Properties) != 2+len(listExtras[name]) || items.Type != "array" || items.Items == nil || next.Type != "string" {
			t.Errorf("schema %s: want properties items (an array) and next_cursor (a string), got %v", name, slices.Sorted(maps.Keys(s.Properties)))
		}
		if !slices.Contains(s.Required, "items") || !slices.Contains(s.Required, "next_cursor") {
			t.Errorf("schema %s: items and next_cursor must be required, got %v", name, s.Required)
		}
	}
	if lists < 10 {
		t.Errorf("found only %d list schemas", lists)
	}
}
