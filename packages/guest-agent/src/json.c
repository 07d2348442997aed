#define _GNU_SOURCE
#include "json.h"
#include "util.h"
#include <stdlib.h>
#include <string.h>

/* ---- arena: every node of one parse lives here, freed at once ---- */

struct jarena {
	struct jarena *next;
	size_t used, cap;
	char mem[];
};

static void *aalloc(struct jarena **a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (!*a || (*a)->cap - (*a)->used < n) {
		size_t cap = n > 8192 ? n : 8192;
		struct jarena *b = xmalloc(sizeof *b + cap);
		b->used = 0;
		b->cap = cap;
		if (*a && n > 8192) {
			/* Big block: link behind the current one so its free space stays usable. */
			b->next = (*a)->next;
			(*a)->next = b;
		} else {
			b->next = *a;
			*a = b;
		}
		b->used = n;
		return b->mem;
	}
	void *p = (*a)->mem + (*a)->used;
	(*a)->used += n;
	return p;
}

void jarena_free(struct jarena *a)
{
	while (a) {
		struct jarena *n = a->next;
		free(a);
		a = n;
	}
}

/* ---- parser ---- */

struct parser {
	const char *s, *e;
	struct jarena **a;
	int depth;
};

static void ws(struct parser *p)
{
	while (p->s < p->e && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
		p->s++;
}

static int hex4(const char *s, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	*out = v;
	return 0;
}

static char *utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		*o++ = cp;
	} else if (cp < 0x800) {
		*o++ = 0xc0 | cp >> 6;
		*o++ = 0x80 | (cp & 63);
	} else if (cp < 0x10000) {
		*o++ = 0xe0 | cp >> 12;
		*o++ = 0x80 | ((cp >> 6) & 63);
		*o++ = 0x80 | (cp & 63);
	} else {
		*o++ = 0xf0 | cp >> 18;
		*o++ = 0x80 | ((cp >> 12) & 63);
		*o++ = 0x80 | ((cp >> 6) & 63);
		*o++ = 0x80 | (cp & 63);
	}
	return o;
}

/* p->s is just past the opening quote. Decoded output is never longer than the input. */
static int pstring(struct parser *p, char **out, size_t *outlen)
{
	const char *q = p->s;
	while (q < p->e && *q != '"') {
		if (*q == '\\')
			q++;
		q++;
	}
	if (q >= p->e)
		return -1;
	char *o = aalloc(p->a, q - p->s + 1), *start = o;
	while (p->s < q) {
		unsigned char c = *p->s++;
		if (c < 0x20)
			return -1;
		if (c != '\\') {
			*o++ = c;
			continue;
		}
		c = *p->s++;
		switch (c) {
		case '"': case '\\': case '/': *o++ = c; break;
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u': {
			unsigned cp, lo;
			if (q - p->s < 4 || hex4(p->s, &cp))
				return -1;
			p->s += 4;
			if (cp >= 0xd800 && cp < 0xdc00) {
				/* High surrogate: combine with a following low one, else U+FFFD. */
				if (q - p->s >= 6 && p->s[0] == '\\' && p->s[1] == 'u' && !hex4(p->s + 2, &lo) &&
				    lo >= 0xdc00 && lo < 0xe000) {
					p->s += 6;
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				} else {
					cp = 0xfffd;
				}
			} else if (cp >= 0xdc00 && cp < 0xe000) {
				cp = 0xfffd;
			}
			o = utf8(o, cp);
			break;
		}
		default:
			return -1;
		}
	}
	p->s = q + 1;
	*o = 0;
	*out = start;
	*outlen = o - start;
	return 0;
}

static struct jv *pvalue(struct parser *p);

static struct jv *pcontainer(struct parser *p, struct jv *v, char close)
{
	size_t n = 0, cap = 0;
	struct jv **items = NULL;
	char **keys = NULL;
	int isobj = close == '}';
	ws(p);
	if (p->s < p->e && *p->s == close) {
		p->s++;
		return v;
	}
	for (;;) {
		char *k = NULL;
		size_t kl;
		ws(p);
		if (isobj) {
			if (p->s >= p->e || *p->s != '"')
				goto fail;
			p->s++;
			if (pstring(p, &k, &kl))
				goto fail;
			ws(p);
			if (p->s >= p->e || *p->s != ':')
				goto fail;
			p->s++;
		}
		struct jv *c = pvalue(p);
		if (!c)
			goto fail;
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			items = xrealloc(items, cap * sizeof *items);
			if (isobj)
				keys = xrealloc(keys, cap * sizeof *keys);
		}
		items[n] = c;
		if (isobj)
			keys[n] = k;
		n++;
		ws(p);
		if (p->s >= p->e)
			goto fail;
		if (*p->s == ',') {
			p->s++;
			continue;
		}
		if (*p->s != close)
			goto fail;
		p->s++;
		break;
	}
	v->n = n;
	v->items = aalloc(p->a, n * sizeof *items);
	memcpy(v->items, items, n * sizeof *items);
	if (isobj) {
		v->keys = aalloc(p->a, n * sizeof *keys);
		memcpy(v->keys, keys, n * sizeof *keys);
	}
	free(items);
	free(keys);
	return v;
fail:
	free(items);
	free(keys);
	return NULL;
}

static struct jv *pvalue(struct parser *p)
{
	ws(p);
	if (p->s >= p->e || p->depth > 64)
		return NULL;
	struct jv *v = aalloc(p->a, sizeof *v);
	memset(v, 0, sizeof *v);
	char c = *p->s;
	if (c == '{' || c == '[') {
		p->s++;
		p->depth++;
		v->t = c == '{' ? J_OBJ : J_ARR;
		v = pcontainer(p, v, c == '{' ? '}' : ']');
		p->depth--;
		return v;
	}
	if (c == '"') {
		p->s++;
		v->t = J_STR;
		return pstring(p, &v->s, &v->n) ? NULL : v;
	}
	static const struct { const char *w; enum jtype t; int b; } lits[] = {
		{"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
	for (size_t i = 0; i < 3; i++) {
		size_t l = strlen(lits[i].w);
		if ((size_t)(p->e - p->s) >= l && !memcmp(p->s, lits[i].w, l)) {
			p->s += l;
			v->t = lits[i].t;
			v->b = lits[i].b;
			return v;
		}
	}
	/* Number: copy the lexeme so strtod/strtoll can't run past the frame. */
	const char *q = p->s;
	int isint = 1;
	while (q < p->e && strchr("+-0123456789.eE", *q)) {
		if (*q == '.' || *q == 'e' || *q == 'E')
			isint = 0;
		q++;
	}
	size_t l = q - p->s;
	if (!l || l > 40)
		return NULL;
	char tmp[48], *end;
	memcpy(tmp, p->s, l);
	tmp[l] = 0;
	v->t = J_NUM;
	v->d = strtod(tmp, &end);
	if (*end)
		return NULL;
	if (isint) {
		v->i = strtoll(tmp, &end, 10);
		v->is_int = !*end && v->d > -9.2e18 && v->d < 9.2e18;
	} else if (v->d > -9.2e18 && v->d < 9.2e18 && v->d == (double)(int64_t)v->d) {
		v->i = (int64_t)v->d;
		v->is_int = 1;
	}
	p->s = q;
	return v;
}

struct jv *json_parse(const char *s, size_t len, struct jarena **arena)
{
	struct parser p = {s, s + len, arena, 0};
	*arena = NULL;
	struct jv *v = pvalue(&p);
	if (!v)
		return NULL;
	ws(&p);
	return p.s == p.e ? v : NULL;
}

const struct jv *jget(const struct jv *obj, const char *key)
{
	if (!obj || obj->t != J_OBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (!strcmp(obj->keys[i], key))
			return obj->items[i];
	return NULL;
}

/* ---- writer ---- */

void jw_init(struct jw *w, struct buf *b)
{
	memset(w, 0, sizeof *w);
	w->b = b;
}

static void sep(struct jw *w)
{
	if (w->after_key) {
		w->after_key = 0;
		return;
	}
	if (w->depth > 0) {
		if (!w->first[w->depth])
			buf_addc(w->b, ',');
		w->first[w->depth] = 0;
	}
}

static void open_(struct jw *w, char c)
{
	sep(w);
	buf_addc(w->b, c);
	if (w->depth < 31)
		w->depth++;
	w->first[w->depth] = 1;
}

void jw_obj(struct jw *w) { open_(w, '{'); }
void jw_arr(struct jw *w) { open_(w, '['); }
void jw_end_obj(struct jw *w) { buf_addc(w->b, '}'); w->depth--; }
void jw_end_arr(struct jw *w) { buf_addc(w->b, ']'); w->depth--; }

static void esc(struct buf *b, const char *s, size_t n);

void jw_key(struct jw *w, const char *k)
{
	sep(w);
	esc(w->b, k, strlen(k));
	buf_addc(w->b, ':');
	w->after_key = 1;
}

/* Length of a valid UTF-8 sequence at s, or 0 if invalid. */
static size_t u8len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t l;
	unsigned cp;
	if (c < 0xc2 || c > 0xf4)
		return 0;
	l = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	if (n < l)
		return 0;
	cp = c & (0x3f >> (l - 1));
	for (size_t i = 1; i < l; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((l == 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) || (l == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return l;
}

/* Escapes as needed; invalid UTF-8 bytes (file names can be anything) become U+FFFD. */
static void esc(struct buf *b, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	buf_reserve(b, n + 2);
	buf_addc(b, '"');
	for (size_t i = 0; i < n;) {
		unsigned char c = u[i];
		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			size_t j = i;
			while (j < n && u[j] >= 0x20 && u[j] < 0x80 && u[j] != '"' && u[j] != '\\')
				j++;
			buf_add(b, s + i, j - i);
			i = j;
		} else if (c == '"' || c == '\\') {
			buf_addc(b, '\\');
			buf_addc(b, c);
			i++;
		} else if (c < 0x20) {
			switch (c) {
			case '\n': buf_adds(b, "\\n"); break;
			case '\r': buf_adds(b, "\\r"); break;
			case '\t': buf_adds(b, "\\t"); break;
			default: buf_printf(b, "\\u%04x", c);
			}
			i++;
		} else {
			size_t l = u8len(u + i, n - i);
			if (l) {
				buf_add(b, s + i, l);
				i += l;
			} else {
				buf_adds(b, "\\ufffd");
				i++;
			}
		}
	}
	buf_addc(b, '"');
}

void jw_strn(struct jw *w, const char *s, size_t n)
{
	sep(w);
	esc(w->b, s, n);
}

void jw_str(struct jw *w, const char *s) { jw_strn(w, s, strlen(s)); }

void jw_int(struct jw *w, int64_t v)
{
	sep(w);
	buf_printf(w->b, "%lld", (long long)v);
}

void jw_bool(struct jw *w, int v)
{
	sep(w);
	buf_adds(w->b, v ? "true" : "false");
}

void jw_raw(struct jw *w, const char *frag)
{
	sep(w);
	buf_adds(w->b, frag);
}

void jw_null(struct jw *w)
{
	sep(w);
	buf_adds(w->b, "null");
}

void jw_b64(struct jw *w, const void *p, size_t n)
{
	sep(w);
	size_t l = b64_enc_len(n);
	buf_reserve(w->b, l + 2);
	buf_addc(w->b, '"');
	b64_encode(p, n, w->b->p + w->b->len);
	w->b->len += l;
	buf_addc(w->b, '"');
}
