/*
** kb_bm25: FTS5's bm25() auxiliary function, with each row's token count remembered per connection
** (A-SEARCH at scale). Loaded by adapters/sqlite/rank.py into the search index's connections; built there with the
** system's C compiler against SQLite's extension header, once per user (a missing compiler or header
** leaves FTS5's own bm25(), the same scores, slower).
**
** Why: bm25() asks FTS5 for the current row's size (xColumnSize) on every matching row, a lookup of the
** %_docsize table by rowid; on the scale corpus that lookup is about two thirds of the full-text top-k's
** time (bench/fts_floor_bench.py). A row's size never changes while its rowid exists, and the search
** index never reuses a rowid (candidates.py: each source's ids only grow, rolled-back ids were never
** committed), so a connection may keep the sizes it has read: a dense array of 16-bit counts per source
** range (rowid >> 32), indexed by the rowid's low 32 bits, 0 meaning "not read yet".
**
** The score is bm25()'s, to the bit: the same IDF (log((N - n + 0.5) / (n + 0.5)), at least 1e-6), the same
** average length (all columns' tokens / rows), k1 = 1.2, b = 0.75, each instance weighted by its column's
** argument (default 1.0), the same order of floating-point operations, the result negated.
**
** A connection is stepped by one thread at a time (SQLite's connection mutex), so its cache needs no lock.
*/
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1
#include <math.h>
#include <string.h>

#define KB_RANK_K1 1.2
#define KB_RANK_B 0.75
#define KB_RANGE_BITS 32
#define KB_MAX_CACHED_INDEX ((sqlite3_int64)1 << 26) /* 64M ids of one source (128 MiB): beyond, no cache */
#define KB_MAX_CACHED_TOKENS 65534                    /* a count stored as count + 1 in 16 bits */

typedef struct KbRange {
  sqlite3_int64 no;     /* rowid >> 32: the source's range */
  unsigned short *size; /* size[i] = tokens + 1 of rowid (no << 32) + i; 0: not read yet */
  sqlite3_int64 cap;    /* entries of size[] */
} KbRange;

typedef struct KbSizes { /* one per connection: the user data of its kb_bm25 */
  KbRange *ranges;
  int n;
  int cap;
} KbSizes;

typedef struct KbQuery { /* one per statement: FTS5's auxdata */
  int nPhrase;
  double avgdl;
  double *idf;
  double *freq;
} KbQuery;

static void kb_sizes_free(void *p) {
  KbSizes *s = (KbSizes *)p;
  int i;
  if (s == 0) return;
  for (i = 0; i < s->n; i++) sqlite3_free(s->ranges[i].size);
  sqlite3_free(s->ranges);
  sqlite3_free(s);
}

static KbRange *kb_range(KbSizes *s, sqlite3_int64 no) {
  int i;
  for (i = 0; i < s->n; i++) {
    if (s->ranges[i].no == no) return &s->ranges[i];
  }
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 8;
    KbRange *grown = (KbRange *)sqlite3_realloc64(s->ranges, (sqlite3_uint64)cap * sizeof(KbRange));
    if (grown == 0) return 0;
    s->ranges = grown;
    s->cap = cap;
  }
  s->ranges[s->n].no = no;
  s->ranges[s->n].size = 0;
  s->ranges[s->n].cap = 0;
  return &s->ranges[s->n++];
}

/* Room for index i in r (no room on allocation failure or past KB_MAX_CACHED_INDEX: the caller asks FTS5). */
static int kb_reserve(KbRange *r, sqlite3_int64 i) {
  sqlite3_int64 cap;
  unsigned short *grown;
  if (i < r->cap) return 1;
  if (i >= KB_MAX_CACHED_INDEX) return 0;
  cap = r->cap ? r->cap : 1024;
  while (cap <= i) cap *= 2;
  if (cap > KB_MAX_CACHED_INDEX) cap = KB_MAX_CACHED_INDEX;
  grown = (unsigned short *)sqlite3_realloc64(r->size, (sqlite3_uint64)cap * sizeof(unsigned short));
  if (grown == 0) return 0;
  memset(grown + r->cap, 0, (size_t)(cap - r->cap) * sizeof(unsigned short));
  r->size = grown;
  r->cap = cap;
  return 1;
}

/* The current row's tokens in all columns: remembered, else FTS5's xColumnSize (then remembered). */
static int kb_row_tokens(KbSizes *s, const Fts5ExtensionApi *api, Fts5Context *fts, int *out) {
  sqlite3_int64 rowid = api->xRowid(fts);
  KbRange *r = 0;
  sqlite3_int64 i = 0;
  int rc;
  if (rowid >= 0) {
    r = kb_range(s, rowid >> KB_RANGE_BITS);
    i = rowid & (((sqlite3_int64)1 << KB_RANGE_BITS) - 1);
    if (r && i < r->cap && r->size[i] != 0) {
      *out = (int)r->size[i] - 1;
      return SQLITE_OK;
    }
  }
  rc = api->xColumnSize(fts, -1, out);
  if (rc == SQLITE_OK && r && *out >= 0 && *out <= KB_MAX_CACHED_TOKENS && kb_reserve(r, i)) {
    r->size[i] = (unsigned short)(*out + 1);
  }
  return rc;
}

static int kb_count_row(const Fts5ExtensionApi *api, Fts5Context *fts, void *user) {
  (void)api;
  (void)fts;
  (*(sqlite3_int64 *)user)++;
  return SQLITE_OK;
}

/* The statement's IDF per phrase and average row length, computed on its first row as bm25() does. */
static int kb_query(const Fts5ExtensionApi *api, Fts5Context *fts, KbQuery **out) {
  KbQuery *q = (KbQuery *)api->xGetAuxdata(fts, 0);
  sqlite3_int64 rows = 0, tokens = 0;
  int rc = SQLITE_OK, i, nPhrase;
  if (q != 0) {
    *out = q;
    return SQLITE_OK;
  }
  nPhrase = api->xPhraseCount(fts);
  q = (KbQuery *)sqlite3_malloc64(sizeof(KbQuery) + (sqlite3_uint64)nPhrase * 2 * sizeof(double));
  if (q == 0) return SQLITE_NOMEM;
  memset(q, 0, sizeof(KbQuery) + (size_t)nPhrase * 2 * sizeof(double));
  q->nPhrase = nPhrase;
  q->idf = (double *)&q[1];
  q->freq = &q->idf[nPhrase];
  rc = api->xRowCount(fts, &rows);
  if (rc == SQLITE_OK) rc = api->xColumnTotalSize(fts, -1, &tokens);
  if (rc == SQLITE_OK) q->avgdl = (double)tokens / (double)rows;
  for (i = 0; rc == SQLITE_OK && i < nPhrase; i++) {
    sqlite3_int64 hits = 0;
    rc = api->xQueryPhrase(fts, i, (void *)&hits, kb_count_row);
    if (rc == SQLITE_OK) {
      double idf = log((rows - hits + 0.5) / (hits + 0.5));
      q->idf[i] = idf <= 0.0 ? 1e-6 : idf;
    }
  }
  if (rc == SQLITE_OK) rc = api->xSetAuxdata(fts, q, sqlite3_free); /* frees q itself on failure */
  else sqlite3_free(q);
  *out = rc == SQLITE_OK ? q : 0;
  return rc;
}

static void kb_bm25(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx, int nVal,
                    sqlite3_value **apVal) {
  KbSizes *sizes = (KbSizes *)api->xUserData(fts);
  KbQuery *q = 0;
  double score = 0.0, D = 0.0;
  int rc, i, nInst = 0, tokens = 0;
  rc = kb_query(api, fts, &q);
  if (rc == SQLITE_OK) {
    memset(q->freq, 0, sizeof(double) * (size_t)q->nPhrase);
    rc = api->xInstCount(fts, &nInst);
  }
  for (i = 0; rc == SQLITE_OK && i < nInst; i++) {
    int phrase, column, offset;
    rc = api->xInst(fts, i, &phrase, &column, &offset);
    if (rc == SQLITE_OK) q->freq[phrase] += nVal > column ? sqlite3_value_double(apVal[column]) : 1.0;
  }
  if (rc == SQLITE_OK) {
    rc = kb_row_tokens(sizes, api, fts, &tokens);
    D = (double)tokens;
  }
  for (i = 0; rc == SQLITE_OK && i < q->nPhrase; i++) {
    score += q->idf[i] * ((q->freq[i] * (KB_RANK_K1 + 1.0)) /
                          (q->freq[i] + KB_RANK_K1 * (1 - KB_RANK_B + KB_RANK_B * D / q->avgdl)));
  }
  if (rc == SQLITE_OK) sqlite3_result_double(ctx, -1.0 * score);
  else sqlite3_result_error_code(ctx, rc);
}

static fts5_api *kb_fts5_api(sqlite3 *db) {
  fts5_api *api = 0;
  sqlite3_stmt *stmt = 0;
  if (sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &stmt, 0) == SQLITE_OK) {
    sqlite3_bind_pointer(stmt, 1, (void *)&api, "fts5_api_ptr", 0);
    sqlite3_step(stmt);
  }
  sqlite3_finalize(stmt);
  return api;
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_kbrank_init(sqlite3 *db, char **error, const sqlite3_api_routines *routines) {
  fts5_api *fts5;
  KbSizes *sizes;
  SQLITE_EXTENSION_INIT2(routines);
  fts5 = kb_fts5_api(db);
  if (fts5 == 0 || fts5->iVersion < 2) {
    *error = sqlite3_mprintf("kb_rank: this SQLite has no FTS5 API v2");
    return SQLITE_ERROR;
  }
  sizes = (KbSizes *)sqlite3_malloc64(sizeof(KbSizes));
  if (sizes == 0) return SQLITE_NOMEM;
  memset(sizes, 0, sizeof(KbSizes));
  return fts5->xCreateFunction(fts5, "kb_bm25", (void *)sizes, kb_bm25, kb_sizes_free);
}
