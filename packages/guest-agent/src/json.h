/* Minimal JSON: a DOM parser (arena-allocated, freed in one go) and a streaming writer. */
#ifndef DEN_JSON_H
#define DEN_JSON_H
#include "buf.h"
#include <stdint.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jtype t;
	int b;          /* J_BOOL */
	int is_int;     /* J_NUM: exact integer that fits int64 */
	int64_t i;
	double d;
	char *s;        /* J_STR: NUL-terminated, may contain NULs (see n) */
	size_t n;       /* J_STR: byte length; J_ARR/J_OBJ: element count */
	struct jv **items;
	char **keys;    /* J_OBJ */
};

struct jarena;

/* Returns the root or NULL on malformed input. *arena must be freed either way. */
struct jv *json_parse(const char *s, size_t len, struct jarena **arena);
void jarena_free(struct jarena *a);

const struct jv *jget(const struct jv *obj, const char *key);

/* Writer. Handles commas; the caller nests begin/end correctly. */
struct jw {
	struct buf *b;
	int depth;
	unsigned char first[32];
	int after_key;
};

void jw_init(struct jw *w, struct buf *b);
void jw_obj(struct jw *w);
void jw_arr(struct jw *w);
void jw_end_obj(struct jw *w);
void jw_end_arr(struct jw *w);
void jw_key(struct jw *w, const char *k);
void jw_strn(struct jw *w, const char *s, size_t n);
void jw_str(struct jw *w, const char *s);
void jw_int(struct jw *w, int64_t v);
void jw_bool(struct jw *w, int v);
void jw_null(struct jw *w);
/* Appends a pre-rendered fragment as the next element (e.g. "\"k\":[1]" inside an object). */
void jw_raw(struct jw *w, const char *frag);
/* Base64-encodes raw bytes as a JSON string. */
void jw_b64(struct jw *w, const void *p, size_t n);

static inline void jw_kstr(struct jw *w, const char *k, const char *s) { jw_key(w, k); jw_str(w, s); }
static inline void jw_kint(struct jw *w, const char *k, int64_t v) { jw_key(w, k); jw_int(w, v); }
static inline void jw_kbool(struct jw *w, const char *k, int v) { jw_key(w, k); jw_bool(w, v); }
#endif
