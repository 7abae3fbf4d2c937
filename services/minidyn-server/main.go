// Command minidyn-server serves an in-memory, DynamoDB-JSON-protocol compatible API on a loopback
// address, for local development and integration tests (`kb services start`).
//
// It wraps github.com/truora/minidyn/server (MIT licensed) and adds:
//
//   - a global lock around every request: minidyn's table-management calls (CreateTable,
//     DeleteTable, DescribeTable, TransactGetItems, ...) touch shared maps without locking, and an
//     unsynchronised Go map access can crash the whole process;
//   - top-level REMOVE in update expressions: minidyn v0.8.2 parses and evaluates `REMOVE attr` but
//     never deletes the attribute from the stored item (nested paths such as `REMOVE l[0]` work);
//     UpdateItem and TransactWriteItems Updates that remove top-level attributes are completed
//     here, atomically under the global lock (see removeFixups);
//   - TableStatus/AttributeDefinitions/BillingModeSummary/... in table descriptions (minidyn
//     leaves TableStatus empty, which makes the SDK's table_exists waiter spin forever);
//   - ListTables, UpdateTimeToLive and DescribeTimeToLive, which minidyn does not implement (TTL is
//     recorded and reported, items are never expired — code must filter on the TTL attribute
//     anyway, as real DynamoDB deletes expired items lazily);
//   - proper JSON errors (UnknownOperationException) for anything else that is not supported;
//   - GET / answering "ok" for plain health probes.
//
// Data lives in memory only and is lost when the process stops.
//
// Usage:
//
//	minidyn-server -addr 127.0.0.1:8001
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/truora/minidyn/server"
)

type ttlSpec struct {
	AttributeName string `json:"AttributeName"`
	Enabled       bool   `json:"Enabled"`
}

type tableMeta struct {
	created time.Time
	create  map[string]any // the CreateTable request, for fields minidyn does not echo back
}

type app struct {
	mu     sync.Mutex
	inner  http.Handler
	tables map[string]*tableMeta
	ttl    map[string]ttlSpec
}

func newApp() *app {
	return &app{
		inner:  server.NewServer(),
		tables: map[string]*tableMeta{},
		ttl:    map[string]ttlSpec{},
	}
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func writeErr(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]string{
		"__type":  "com.amazonaws.dynamodb.v20120810#" + typ,
		"message": msg,
	})
}

// callInner runs a request through the minidyn handler and returns the recorded response.
func (a *app) callInner(op string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	rec := httptest.NewRecorder()
	a.inner.ServeHTTP(rec, req)
	return rec
}

func (a *app) tableExists(name string) bool {
	body, _ := json.Marshal(map[string]string{"TableName": name})
	return a.callInner("DescribeTable", body).Code == http.StatusOK
}

var innerOps = map[string]bool{
	"CreateTable": true, "UpdateTable": true, "DeleteTable": true, "DescribeTable": true,
	"PutItem": true, "GetItem": true, "UpdateItem": true, "DeleteItem": true,
	"Query": true, "Scan": true, "BatchWriteItem": true, "BatchGetItem": true,
	"TransactWriteItems": true, "TransactGetItems": true,
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		writeErr(w, http.StatusBadRequest, "SerializationException", err.Error())
		return
	}
	target := r.Header.Get("X-Amz-Target")
	op := target[strings.LastIndex(target, ".")+1:]

	a.mu.Lock()
	defer a.mu.Unlock()

	switch {
	case op == "ListTables":
		a.listTables(w, body)
	case op == "UpdateTimeToLive":
		a.updateTTL(w, body)
	case op == "DescribeTimeToLive":
		a.describeTTL(w, body)
	case op == "UpdateItem" && a.updateItemWithRemove(w, body):
		// handled
	case innerOps[op]:
		var fixups []removeFixup
		if op == "TransactWriteItems" {
			fixups = transactRemoveFixups(body)
		}
		rec := a.callInner(op, body)
		if rec.Code == http.StatusOK {
			for _, f := range fixups {
				a.applyRemove(f.table, f.key, f.attrs)
			}
		}
		out := rec.Body.Bytes()
		if rec.Code == http.StatusOK {
			switch op {
			case "CreateTable", "DeleteTable", "DescribeTable", "UpdateTable":
				out = a.tableResponse(op, body, out)
				rec.Header().Del("Content-Length")
			}
		}
		for k, vs := range rec.Header() {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		if w.Header().Get("Content-Type") == "" || strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(out)
	default:
		writeErr(w, http.StatusBadRequest, "UnknownOperationException",
			fmt.Sprintf("operation %q is not supported by minidyn-server", op))
	}
}

// tableResponse records table creation/deletion and completes the TableDescription that minidyn
// returns (it leaves TableStatus empty, which breaks the SDK's table_exists waiters, and omits
// AttributeDefinitions, BillingModeSummary, TableArn, CreationDateTime, ...).
func (a *app) tableResponse(op string, reqBody, respBody []byte) []byte {
	var req map[string]any
	if json.Unmarshal(reqBody, &req) != nil {
		return respBody
	}
	name, _ := req["TableName"].(string)
	meta := a.tables[name]
	switch op {
	case "CreateTable":
		meta = &tableMeta{created: time.Now(), create: req}
		a.tables[name] = meta
	case "DeleteTable":
		delete(a.tables, name)
		delete(a.ttl, name)
	}
	var resp map[string]any
	if json.Unmarshal(respBody, &resp) != nil {
		return respBody
	}
	key := "TableDescription"
	if op == "DescribeTable" {
		key = "Table"
	}
	desc, ok := resp[key].(map[string]any)
	if !ok {
		return respBody
	}
	status := "ACTIVE"
	if op == "DeleteTable" {
		status = "DELETING"
	}
	if s, _ := desc["TableStatus"].(string); s == "" {
		desc["TableStatus"] = status
	}
	if s, _ := desc["MultiRegionConsistency"].(string); s == "" {
		delete(desc, "MultiRegionConsistency")
	}
	desc["TableArn"] = "arn:aws:dynamodb:us-east-1:000000000000:table/" + name
	if _, ok := desc["TableSizeBytes"]; !ok {
		desc["TableSizeBytes"] = 0
	}
	if meta != nil {
		desc["CreationDateTime"] = float64(meta.created.UnixMilli()) / 1000
		if ad, ok := meta.create["AttributeDefinitions"]; ok {
			if desc["AttributeDefinitions"] == nil {
				desc["AttributeDefinitions"] = ad
			}
		}
		mode, _ := meta.create["BillingMode"].(string)
		if mode == "" {
			mode = "PROVISIONED"
		}
		desc["BillingModeSummary"] = map[string]any{"BillingMode": mode}
		if desc["ProvisionedThroughput"] == nil {
			desc["ProvisionedThroughput"] = map[string]any{
				"NumberOfDecreasesToday": 0, "ReadCapacityUnits": 0, "WriteCapacityUnits": 0,
			}
		}
	}
	for _, k := range []string{"GlobalSecondaryIndexes", "LocalSecondaryIndexes"} {
		if idxs, ok := desc[k].([]any); ok {
			for _, x := range idxs {
				if idx, ok := x.(map[string]any); ok && k == "GlobalSecondaryIndexes" {
					if s, _ := idx["IndexStatus"].(string); s == "" {
						idx["IndexStatus"] = "ACTIVE"
					}
				}
			}
		}
	}
	out, err := json.Marshal(resp)
	if err != nil {
		return respBody
	}
	return out
}

// ---- top-level REMOVE emulation -------------------------------------------------------------

type removeFixup struct {
	table string
	key   json.RawMessage
	attrs []string
}

func isWordByte(c byte) bool {
	return c == '_' || c == '#' || c == ':' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// topLevelRemoves returns the top-level attribute names (aliases resolved) listed in the REMOVE
// clause of an update expression.
func topLevelRemoves(expr string, names map[string]string) []string {
	type clause struct {
		kw         string
		start, end int
	}
	var clauses []clause
	depth := 0
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '(':
			depth++
			i++
		case c == ')':
			depth--
			i++
		case isWordByte(c):
			j := i
			for j < len(expr) && isWordByte(expr[j]) {
				j++
			}
			word := strings.ToUpper(expr[i:j])
			if depth == 0 && (word == "SET" || word == "ADD" || word == "REMOVE" || word == "DELETE") {
				if n := len(clauses); n > 0 {
					clauses[n-1].end = i
				}
				clauses = append(clauses, clause{kw: word, start: j, end: len(expr)})
			}
			i = j
		default:
			i++
		}
	}
	var attrs []string
	for _, cl := range clauses {
		if cl.kw != "REMOVE" {
			continue
		}
		for _, part := range strings.Split(expr[cl.start:cl.end], ",") {
			part = strings.TrimSpace(part)
			if part == "" || strings.ContainsAny(part, ".[]") {
				continue // nested paths are handled by minidyn itself
			}
			if strings.HasPrefix(part, "#") {
				if real, ok := names[part]; ok {
					part = real
				}
			}
			attrs = append(attrs, part)
		}
	}
	return attrs
}

type updateReq struct {
	TableName                string
	Key                      json.RawMessage
	UpdateExpression         string
	ExpressionAttributeNames map[string]string
	ReturnValues             string
}

func transactRemoveFixups(body []byte) []removeFixup {
	var in struct {
		TransactItems []struct {
			Update *updateReq
		}
	}
	if json.Unmarshal(body, &in) != nil {
		return nil
	}
	var out []removeFixup
	for _, it := range in.TransactItems {
		if it.Update == nil {
			continue
		}
		if attrs := topLevelRemoves(it.Update.UpdateExpression, it.Update.ExpressionAttributeNames); len(attrs) > 0 {
			out = append(out, removeFixup{table: it.Update.TableName, key: it.Update.Key, attrs: attrs})
		}
	}
	return out
}

func (a *app) getItem(table string, key json.RawMessage) map[string]json.RawMessage {
	body, _ := json.Marshal(map[string]any{"TableName": table, "Key": key, "ConsistentRead": true})
	rec := a.callInner("GetItem", body)
	var out struct{ Item map[string]json.RawMessage }
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
		return nil
	}
	return out.Item
}

// applyRemove deletes top-level attributes from a stored item (read-modify-write; callers hold a.mu).
func (a *app) applyRemove(table string, key json.RawMessage, attrs []string) map[string]json.RawMessage {
	item := a.getItem(table, key)
	if item == nil {
		return nil
	}
	changed := false
	for _, name := range attrs {
		if _, ok := item[name]; ok {
			delete(item, name)
			changed = true
		}
	}
	if changed {
		body, _ := json.Marshal(map[string]any{"TableName": table, "Item": item})
		if rec := a.callInner("PutItem", body); rec.Code != http.StatusOK {
			log.Printf("minidyn-server: REMOVE fix-up PutItem failed: %s", rec.Body.String())
		}
	}
	return item
}

// updateItemWithRemove serves UpdateItem requests whose expression removes top-level attributes.
// It returns false (not handled) for every other UpdateItem.
func (a *app) updateItemWithRemove(w http.ResponseWriter, body []byte) bool {
	var in updateReq
	if json.Unmarshal(body, &in) != nil {
		return false
	}
	attrs := topLevelRemoves(in.UpdateExpression, in.ExpressionAttributeNames)
	if len(attrs) == 0 {
		return false
	}
	var req map[string]any
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	old := a.getItem(in.TableName, in.Key)
	req["ReturnValues"] = "NONE"
	inner, _ := json.Marshal(req)
	rec := a.callInner("UpdateItem", inner)
	if rec.Code != http.StatusOK {
		for k, vs := range rec.Header() {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	}
	updated := a.applyRemove(in.TableName, in.Key, attrs)
	out := map[string]any{}
	diff := func(from, other map[string]json.RawMessage) map[string]json.RawMessage {
		res := map[string]json.RawMessage{}
		for k, v := range from {
			if o, ok := other[k]; !ok || !bytes.Equal(o, v) {
				res[k] = v
			}
		}
		return res
	}
	switch strings.ToUpper(in.ReturnValues) {
	case "ALL_OLD":
		if len(old) > 0 {
			out["Attributes"] = old
		}
	case "ALL_NEW":
		out["Attributes"] = updated
	case "UPDATED_OLD":
		if d := diff(old, updated); len(d) > 0 {
			out["Attributes"] = d
		}
	case "UPDATED_NEW":
		if d := diff(updated, old); len(d) > 0 {
			out["Attributes"] = d
		}
	}
	writeJSON(w, http.StatusOK, out)
	return true
}

func (a *app) listTables(w http.ResponseWriter, body []byte) {
	var in struct {
		ExclusiveStartTableName string
		Limit                   int
	}
	_ = json.Unmarshal(body, &in)
	names := make([]string, 0, len(a.tables))
	for n := range a.tables {
		if in.ExclusiveStartTableName == "" || n > in.ExclusiveStartTableName {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := map[string]any{}
	limit := in.Limit
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	if len(names) > limit {
		names = names[:limit]
		out["LastEvaluatedTableName"] = names[len(names)-1]
	}
	out["TableNames"] = names
	writeJSON(w, http.StatusOK, out)
}

func (a *app) updateTTL(w http.ResponseWriter, body []byte) {
	var in struct {
		TableName               string
		TimeToLiveSpecification *ttlSpec
	}
	if err := json.Unmarshal(body, &in); err != nil || in.TimeToLiveSpecification == nil ||
		in.TimeToLiveSpecification.AttributeName == "" {
		writeErr(w, http.StatusBadRequest, "ValidationException", "TableName and TimeToLiveSpecification are required")
		return
	}
	if !a.tableExists(in.TableName) {
		writeErr(w, http.StatusBadRequest, "ResourceNotFoundException", "Requested resource not found")
		return
	}
	a.ttl[in.TableName] = *in.TimeToLiveSpecification
	writeJSON(w, http.StatusOK, map[string]any{"TimeToLiveSpecification": in.TimeToLiveSpecification})
}

func (a *app) describeTTL(w http.ResponseWriter, body []byte) {
	var in struct{ TableName string }
	_ = json.Unmarshal(body, &in)
	if !a.tableExists(in.TableName) {
		writeErr(w, http.StatusBadRequest, "ResourceNotFoundException", "Requested resource not found")
		return
	}
	desc := map[string]any{"TimeToLiveStatus": "DISABLED"}
	if spec, ok := a.ttl[in.TableName]; ok {
		if spec.Enabled {
			desc = map[string]any{"TimeToLiveStatus": "ENABLED", "AttributeName": spec.AttributeName}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"TimeToLiveDescription": desc})
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8001", "listen address (host:port); keep it on loopback")
	flag.Parse()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("minidyn-server: listen %s: %v", *addr, err)
	}
	log.Printf("minidyn-server listening on http://%s", ln.Addr())

	srv := &http.Server{Handler: newApp()}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		log.Printf("minidyn-server: %v, shutting down", s)
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatalf("minidyn-server: %v", err)
	}
}
