/*
 * rdmx lambda — library functions whose work is not bounded by the VM's
 * instruction count, rewritten to charge it (rdmx__lambda_charge) so that
 * the instruction budget and the deadline also stop them:
 *
 * - string.find / match / gmatch / gsub: Lua's pattern matcher can take
 *   time polynomial in the subject (".-.-.-x" on a long string) inside one
 *   C call; here every matcher step is charged, and a plain find charges
 *   the bytes it scanned.
 * - string.rep: the original loops n times even when the result is empty
 *   (string.rep("", 2^62)); here the empty case returns at once and the
 *   copies are charged.
 * - table.insert / remove / move / concat / unpack / sort: loops over
 *   ranges the caller chooses (table.move(t, 1, 2^62, 2) on an empty table
 *   runs for ever without allocating); every element is charged.
 *
 * The code is Lua 5.4.4's lstrlib.c and ltablib.c with the charges added
 * (marked "rdmx:"). Those files carry this notice:
 *
 * Copyright (C) 1994-2022 Lua.org, PUC-Rio.
 *
 * Permission is hereby granted, free of charge, to any person obtaining
 * a copy of this software and associated documentation files (the
 * "Software"), to deal in the Software without restriction, including
 * without limitation the rights to use, copy, modify, merge, publish,
 * distribute, sublicense, and/or sell copies of the Software, and to
 * permit persons to whom the Software is furnished to do so, subject to
 * the following conditions:
 *
 * The above copyright notice and this permission notice shall be
 * included in all copies or substantial portions of the Software.
 *
 * THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND,
 * EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF
 * MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT.
 * IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY
 * CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT,
 * TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE
 * SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
 */
#include "lambda/lambda_int.h"

#include <lauxlib.h>
#include <lua.h>

#include <ctype.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#define l_unlikely(x) __builtin_expect(((x) != 0), 0)
#define uchar(c)      ((unsigned char)(c))

/* rdmx: charge in batches of this many steps */
#define STEP_BATCH 1024u

/* ======================================================================== */
/* string: pattern matching (lstrlib.c)                                     */
/* ======================================================================== */

#define LUA_MAXCAPTURES 32
#define CAP_UNFINISHED  (-1)
#define CAP_POSITION    (-2)
#define MAXCCALLS       200
#define L_ESC           '%'
#define SPECIALS        "^$*+?.([%-"

typedef struct MatchState {
    const char *src_init; /* init of source string */
    const char *src_end;  /* end ('\0') of source string */
    const char *p_end;    /* end ('\0') of pattern */
    lua_State *L;
    int matchdepth; /* control for recursive depth */
    unsigned char level; /* total number of captures */
    unsigned steps;      /* rdmx: steps not charged yet */
    struct {
        const char *init;
        ptrdiff_t len;
    } capture[LUA_MAXCAPTURES];
} MatchState;

/* rdmx: one step of the matcher */
static inline void step(MatchState *ms)
{
    if (l_unlikely(++ms->steps >= STEP_BATCH)) {
        ms->steps = 0;
        rdmx__lambda_charge(ms->L, STEP_BATCH);
    }
}

static void flush_steps(MatchState *ms)
{
    unsigned s = ms->steps;
    ms->steps = 0;
    rdmx__lambda_charge(ms->L, s + 1);
}

static size_t posrelatI(lua_Integer pos, size_t len)
{
    if (pos > 0)
        return (size_t)pos;
    else if (pos == 0)
        return 1;
    else if (pos < -(lua_Integer)len)
        return 1;
    else
        return len + (size_t)pos + 1;
}

static const char *match(MatchState *ms, const char *s, const char *p);

static int check_capture(MatchState *ms, int l)
{
    l -= '1';
    if (l_unlikely(l < 0 || l >= ms->level ||
                   ms->capture[l].len == CAP_UNFINISHED))
        return luaL_error(ms->L, "invalid capture index %%%d", l + 1);
    return l;
}

static int capture_to_close(MatchState *ms)
{
    int level = ms->level;
    for (level--; level >= 0; level--)
        if (ms->capture[level].len == CAP_UNFINISHED)
            return level;
    return luaL_error(ms->L, "invalid pattern capture");
}

static const char *classend(MatchState *ms, const char *p)
{
    switch (*p++) {
    case L_ESC: {
        if (l_unlikely(p == ms->p_end))
            luaL_error(ms->L, "malformed pattern (ends with '%%')");
        return p + 1;
    }
    case '[': {
        if (*p == '^')
            p++;
        do { /* look for a ']' */
            if (l_unlikely(p == ms->p_end))
                luaL_error(ms->L, "malformed pattern (missing ']')");
            if (*(p++) == L_ESC && p < ms->p_end)
                p++; /* skip escapes (e.g. '%]') */
        } while (*p != ']');
        return p + 1;
    }
    default:
        return p;
    }
}

static int match_class(int c, int cl)
{
    int res;
    switch (tolower(cl)) {
    case 'a': res = isalpha(c); break;
    case 'c': res = iscntrl(c); break;
    case 'd': res = isdigit(c); break;
    case 'g': res = isgraph(c); break;
    case 'l': res = islower(c); break;
    case 'p': res = ispunct(c); break;
    case 's': res = isspace(c); break;
    case 'u': res = isupper(c); break;
    case 'w': res = isalnum(c); break;
    case 'x': res = isxdigit(c); break;
    case 'z': res = (c == 0); break; /* deprecated option */
    default: return (cl == c);
    }
    return (islower(cl) ? res : !res);
}

static int matchbracketclass(int c, const char *p, const char *ec)
{
    int sig = 1;
    if (*(p + 1) == '^') {
        sig = 0;
        p++; /* skip the '^' */
    }
    while (++p < ec) {
        if (*p == L_ESC) {
            p++;
            if (match_class(c, uchar(*p)))
                return sig;
        } else if ((*(p + 1) == '-') && (p + 2 < ec)) {
            p += 2;
            if (uchar(*(p - 2)) <= c && c <= uchar(*p))
                return sig;
        } else if (uchar(*p) == c)
            return sig;
    }
    return !sig;
}

static int singlematch(MatchState *ms, const char *s, const char *p,
                       const char *ep)
{
    if (s >= ms->src_end)
        return 0;
    else {
        int c = uchar(*s);
        switch (*p) {
        case '.': return 1; /* matches any char */
        case L_ESC: return match_class(c, uchar(*(p + 1)));
        case '[': return matchbracketclass(c, p, ep - 1);
        default: return (uchar(*p) == c);
        }
    }
}

static const char *matchbalance(MatchState *ms, const char *s, const char *p)
{
    if (l_unlikely(p >= ms->p_end - 1))
        luaL_error(ms->L, "malformed pattern (missing arguments to '%%b')");
    if (*s != *p)
        return NULL;
    else {
        int b = *p;
        int e = *(p + 1);
        int cont = 1;
        while (++s < ms->src_end) {
            step(ms); /* rdmx */
            if (*s == e) {
                if (--cont == 0)
                    return s + 1;
            } else if (*s == b)
                cont++;
        }
    }
    return NULL; /* string ends out of balance */
}

static const char *max_expand(MatchState *ms, const char *s, const char *p,
                              const char *ep)
{
    ptrdiff_t i = 0; /* counts maximum expand for item */
    while (singlematch(ms, s + i, p, ep)) {
        step(ms); /* rdmx */
        i++;
    }
    /* keeps trying to match with the maximum repetitions */
    while (i >= 0) {
        const char *res = match(ms, (s + i), ep + 1);
        if (res)
            return res;
        i--; /* else didn't match; reduce 1 repetition to try again */
    }
    return NULL;
}

static const char *min_expand(MatchState *ms, const char *s, const char *p,
                              const char *ep)
{
    for (;;) {
        const char *res = match(ms, s, ep + 1);
        if (res != NULL)
            return res;
        else if (singlematch(ms, s, p, ep))
            s++; /* try with one more repetition */
        else
            return NULL;
    }
}

static const char *start_capture(MatchState *ms, const char *s, const char *p,
                                 int what)
{
    const char *res;
    int level = ms->level;
    if (level >= LUA_MAXCAPTURES)
        luaL_error(ms->L, "too many captures");
    ms->capture[level].init = s;
    ms->capture[level].len = what;
    ms->level = (unsigned char)(level + 1);
    if ((res = match(ms, s, p)) == NULL) /* match failed? */
        ms->level--;                     /* undo capture */
    return res;
}

static const char *end_capture(MatchState *ms, const char *s, const char *p)
{
    int l = capture_to_close(ms);
    const char *res;
    ms->capture[l].len = s - ms->capture[l].init; /* close capture */
    if ((res = match(ms, s, p)) == NULL)          /* match failed? */
        ms->capture[l].len = CAP_UNFINISHED;      /* undo capture */
    return res;
}

static const char *match_capture(MatchState *ms, const char *s, int l)
{
    size_t len;
    l = check_capture(ms, l);
    len = (size_t)ms->capture[l].len;
    ms->steps += (unsigned)(len / 64); /* rdmx: the memcmp */
    step(ms);
    if ((size_t)(ms->src_end - s) >= len &&
        memcmp(ms->capture[l].init, s, len) == 0)
        return s + len;
    else
        return NULL;
}

static const char *match(MatchState *ms, const char *s, const char *p)
{
    if (l_unlikely(ms->matchdepth-- == 0))
        luaL_error(ms->L, "pattern too complex");
init: /* using goto's to optimize tail recursion */
    step(ms); /* rdmx */
    if (p != ms->p_end) { /* end of pattern? */
        switch (*p) {
        case '(': { /* start capture */
            if (*(p + 1) == ')') /* position capture? */
                s = start_capture(ms, s, p + 2, CAP_POSITION);
            else
                s = start_capture(ms, s, p + 1, CAP_UNFINISHED);
            break;
        }
        case ')': { /* end capture */
            s = end_capture(ms, s, p + 1);
            break;
        }
        case '$': {
            if ((p + 1) != ms->p_end) /* is the '$' the last char? */
                goto dflt;            /* no; go to default */
            s = (s == ms->src_end) ? s : NULL; /* check end of string */
            break;
        }
        case L_ESC: { /* escaped sequences not in the format class[*+?-]? */
            switch (*(p + 1)) {
            case 'b': { /* balanced string? */
                s = matchbalance(ms, s, p + 2);
                if (s != NULL) {
                    p += 4;
                    goto init; /* return match(ms, s, p + 4); */
                }              /* else fail (s == NULL) */
                break;
            }
            case 'f': { /* frontier? */
                const char *ep;
                char previous;
                p += 2;
                if (l_unlikely(*p != '['))
                    luaL_error(ms->L, "missing '[' after '%%f' in pattern");
                ep = classend(ms, p); /* points to what is next */
                previous = (s == ms->src_init) ? '\0' : *(s - 1);
                if (!matchbracketclass(uchar(previous), p, ep - 1) &&
                    matchbracketclass(uchar(*s), p, ep - 1)) {
                    p = ep;
                    goto init; /* return match(ms, s, ep); */
                }
                s = NULL; /* match failed */
                break;
            }
            case '0': case '1': case '2': case '3': case '4':
            case '5': case '6': case '7': case '8': case '9': {
                s = match_capture(ms, s, uchar(*(p + 1)));
                if (s != NULL) {
                    p += 2;
                    goto init; /* return match(ms, s, p + 2) */
                }
                break;
            }
            default:
                goto dflt;
            }
            break;
        }
        default:
        dflt : { /* pattern class plus optional suffix */
            const char *ep = classend(ms, p); /* points to optional suffix */
            /* does not match at least once? */
            if (!singlematch(ms, s, p, ep)) {
                if (*ep == '*' || *ep == '?' || *ep == '-') {
                    p = ep + 1;
                    goto init; /* return match(ms, s, ep + 1); */
                } else         /* '+' or no suffix */
                    s = NULL;  /* fail */
            } else {           /* matched once */
                switch (*ep) { /* handle optional suffix */
                case '?': {    /* optional */
                    const char *res;
                    if ((res = match(ms, s + 1, ep + 1)) != NULL)
                        s = res;
                    else {
                        p = ep + 1;
                        goto init;
                    }
                    break;
                }
                case '+': /* 1 or more repetitions */
                    s++;  /* 1 match already done */
                    /* FALLTHROUGH */
                case '*': /* 0 or more repetitions */
                    s = max_expand(ms, s, p, ep);
                    break;
                case '-': /* 0 or more repetitions (minimum) */
                    s = min_expand(ms, s, p, ep);
                    break;
                default: /* no suffix */
                    s++;
                    p = ep;
                    goto init; /* return match(ms, s + 1, ep); */
                }
            }
            break;
        }
        }
    }
    ms->matchdepth++;
    return s;
}

/* rdmx: charges the bytes it scanned */
static const char *lmemfind(lua_State *L, const char *s1, size_t l1,
                            const char *s2, size_t l2)
{
    const char *start = s1;
    if (l2 == 0)
        return s1;
    else if (l2 > l1)
        return NULL;
    else {
        const char *init;
        l2--;
        l1 = l1 - l2;
        while (l1 > 0 && (init = (const char *)memchr(s1, *s2, l1)) != NULL) {
            init++;
            rdmx__lambda_charge(L, 1 + (size_t)(init - start) / 64 +
                                       l2 / 64);
            start = init;
            if (memcmp(init, s2 + 1, l2) == 0)
                return init - 1;
            else {
                l1 -= (size_t)(init - s1);
                s1 = init;
            }
        }
        rdmx__lambda_charge(L, 1 + (size_t)(s1 + l1 - start) / 64);
        return NULL;
    }
}

static size_t get_onecapture(MatchState *ms, int i, const char *s,
                             const char *e, const char **cap)
{
    if (i >= ms->level) {
        if (l_unlikely(i != 0))
            luaL_error(ms->L, "invalid capture index %%%d", i + 1);
        *cap = s;
        return (size_t)(e - s);
    } else {
        ptrdiff_t capl = ms->capture[i].len;
        *cap = ms->capture[i].init;
        if (l_unlikely(capl == CAP_UNFINISHED))
            luaL_error(ms->L, "unfinished capture");
        else if (capl == CAP_POSITION)
            lua_pushinteger(ms->L, (ms->capture[i].init - ms->src_init) + 1);
        return (size_t)capl;
    }
}

static void push_onecapture(MatchState *ms, int i, const char *s,
                            const char *e)
{
    const char *cap;
    ptrdiff_t l = (ptrdiff_t)get_onecapture(ms, i, s, e, &cap);
    if (l != CAP_POSITION)
        lua_pushlstring(ms->L, cap, (size_t)l);
}

static int push_captures(MatchState *ms, const char *s, const char *e)
{
    int i;
    int nlevels = (ms->level == 0 && s) ? 1 : ms->level;
    luaL_checkstack(ms->L, nlevels, "too many captures");
    for (i = 0; i < nlevels; i++)
        push_onecapture(ms, i, s, e);
    return nlevels;
}

static int nospecials(const char *p, size_t l)
{
    size_t upto = 0;
    do {
        if (strpbrk(p + upto, SPECIALS))
            return 0;
        upto += strlen(p + upto) + 1;
    } while (upto <= l);
    return 1;
}

static void prepstate(MatchState *ms, lua_State *L, const char *s, size_t ls,
                      const char *p, size_t lp)
{
    ms->L = L;
    ms->matchdepth = MAXCCALLS;
    ms->src_init = s;
    ms->src_end = s + ls;
    ms->p_end = p + lp;
    ms->steps = 0;
}

static void reprepstate(MatchState *ms)
{
    ms->level = 0;
}

static int str_find_aux(lua_State *L, int find)
{
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    size_t init = posrelatI(luaL_optinteger(L, 3, 1), ls) - 1;
    rdmx__lambda_charge(L, 1 + lp / 64); /* rdmx: nospecials, prepstate */
    if (init > ls) {
        luaL_pushfail(L);
        return 1;
    }
    if (find && (lua_toboolean(L, 4) || nospecials(p, lp))) {
        const char *s2 = lmemfind(L, s + init, ls - init, p, lp);
        if (s2) {
            lua_pushinteger(L, (s2 - s) + 1);
            lua_pushinteger(L, (lua_Integer)((size_t)(s2 - s) + lp));
            return 2;
        }
    } else {
        MatchState ms;
        const char *s1 = s + init;
        int anchor = (*p == '^');
        if (anchor) {
            p++;
            lp--;
        }
        prepstate(&ms, L, s, ls, p, lp);
        do {
            const char *res;
            reprepstate(&ms);
            if ((res = match(&ms, s1, p)) != NULL) {
                flush_steps(&ms);
                if (find) {
                    lua_pushinteger(L, (s1 - s) + 1);
                    lua_pushinteger(L, res - s);
                    return push_captures(&ms, NULL, 0) + 2;
                } else
                    return push_captures(&ms, s1, res);
            }
        } while (s1++ < ms.src_end && !anchor);
        flush_steps(&ms);
    }
    luaL_pushfail(L);
    return 1;
}

static int str_find(lua_State *L)
{
    return str_find_aux(L, 1);
}

static int str_match(lua_State *L)
{
    return str_find_aux(L, 0);
}

typedef struct GMatchState {
    const char *src;
    const char *p;
    const char *lastmatch;
    MatchState ms;
} GMatchState;

static int gmatch_aux(lua_State *L)
{
    GMatchState *gm = (GMatchState *)lua_touserdata(L, lua_upvalueindex(3));
    const char *src;
    gm->ms.L = L;
    for (src = gm->src; src <= gm->ms.src_end; src++) {
        const char *e;
        reprepstate(&gm->ms);
        if ((e = match(&gm->ms, src, gm->p)) != NULL && e != gm->lastmatch) {
            gm->src = gm->lastmatch = e;
            flush_steps(&gm->ms);
            return push_captures(&gm->ms, src, e);
        }
    }
    flush_steps(&gm->ms);
    return 0;
}

static int gmatch(lua_State *L)
{
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    size_t init = posrelatI(luaL_optinteger(L, 3, 1), ls) - 1;
    GMatchState *gm;
    lua_settop(L, 2);
    gm = (GMatchState *)lua_newuserdatauv(L, sizeof(GMatchState), 0);
    if (init > ls)
        init = ls + 1;
    prepstate(&gm->ms, L, s, ls, p, lp);
    gm->src = s + init;
    gm->p = p;
    gm->lastmatch = NULL;
    lua_pushcclosure(L, gmatch_aux, 3);
    return 1;
}

static void add_s(MatchState *ms, luaL_Buffer *b, const char *s,
                  const char *e)
{
    size_t l;
    lua_State *L = ms->L;
    const char *news = lua_tolstring(L, 3, &l);
    const char *p;
    while ((p = (char *)memchr(news, L_ESC, l)) != NULL) {
        luaL_addlstring(b, news, (size_t)(p - news));
        p++;
        if (*p == L_ESC)
            luaL_addchar(b, *p);
        else if (*p == '0')
            luaL_addlstring(b, s, (size_t)(e - s));
        else if (isdigit(uchar(*p))) {
            const char *cap;
            ptrdiff_t resl =
                (ptrdiff_t)get_onecapture(ms, *p - '1', s, e, &cap);
            if (resl == CAP_POSITION)
                luaL_addvalue(b);
            else
                luaL_addlstring(b, cap, (size_t)resl);
        } else
            luaL_error(L, "invalid use of '%c' in replacement string", L_ESC);
        l -= (size_t)(p + 1 - news);
        news = p + 1;
    }
    luaL_addlstring(b, news, l);
}

static int add_value(MatchState *ms, luaL_Buffer *b, const char *s,
                     const char *e, int tr)
{
    lua_State *L = ms->L;
    switch (tr) {
    case LUA_TFUNCTION: {
        int n;
        lua_pushvalue(L, 3);
        n = push_captures(ms, s, e);
        lua_call(L, n, 1);
        break;
    }
    case LUA_TTABLE: {
        push_onecapture(ms, 0, s, e);
        lua_gettable(L, 3);
        break;
    }
    default: {
        add_s(ms, b, s, e);
        return 1;
    }
    }
    if (!lua_toboolean(L, -1)) {
        lua_pop(L, 1);
        luaL_addlstring(b, s, (size_t)(e - s));
        return 0;
    } else if (l_unlikely(!lua_isstring(L, -1)))
        return luaL_error(L, "invalid replacement value (a %s)",
                          luaL_typename(L, -1));
    else {
        luaL_addvalue(b);
        return 1;
    }
}

static int str_gsub(lua_State *L)
{
    size_t srcl, lp;
    const char *src = luaL_checklstring(L, 1, &srcl);
    const char *p = luaL_checklstring(L, 2, &lp);
    const char *lastmatch = NULL;
    int tr = lua_type(L, 3);
    lua_Integer max_s = luaL_optinteger(L, 4, (lua_Integer)srcl + 1);
    int anchor = (*p == '^');
    lua_Integer n = 0;
    int changed = 0;
    MatchState ms;
    luaL_Buffer b;
    luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING ||
                            tr == LUA_TFUNCTION || tr == LUA_TTABLE,
                     3, "string/function/table");
    luaL_buffinit(L, &b);
    if (anchor) {
        p++;
        lp--;
    }
    prepstate(&ms, L, src, srcl, p, lp);
    while (n < max_s) {
        const char *e;
        reprepstate(&ms);
        if ((e = match(&ms, src, p)) != NULL && e != lastmatch) {
            n++;
            changed = add_value(&ms, &b, src, e, tr) | changed;
            src = lastmatch = e;
        } else if (src < ms.src_end)
            luaL_addchar(&b, *src++);
        else
            break;
        if (anchor)
            break;
    }
    flush_steps(&ms);
    if (!changed)
        lua_pushvalue(L, 1);
    else {
        luaL_addlstring(&b, src, (size_t)(ms.src_end - src));
        luaL_pushresult(&b);
    }
    lua_pushinteger(L, n);
    return 2;
}

/* rdmx: string.rep without the empty-result loop, copies charged */
static int str_rep(lua_State *L)
{
    size_t l, lsep;
    const char *s = luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    const char *sep = luaL_optlstring(L, 3, "", &lsep);
    if (n <= 0 || l + lsep == 0)
        lua_pushliteral(L, "");
    else if (l_unlikely(l + lsep < l || l + lsep > (size_t)INT_MAX / (size_t)n))
        return luaL_error(L, "resulting string too large");
    else {
        size_t totallen = (size_t)n * l + (size_t)(n - 1) * lsep;
        luaL_Buffer b;
        char *p;
        rdmx__lambda_charge(L, (uint64_t)n / 8 + totallen / 64);
        p = luaL_buffinitsize(L, &b, totallen);
        while (n-- > 1) {
            memcpy(p, s, l);
            p += l;
            if (lsep > 0) {
                memcpy(p, sep, lsep);
                p += lsep;
            }
        }
        memcpy(p, s, l);
        luaL_pushresultsize(&b, totallen);
    }
    return 1;
}

void rdmx__lambda_patch_string(lua_State *L, int idx)
{
    static const luaL_Reg fns[] = {
        {"find", str_find},   {"match", str_match}, {"gmatch", gmatch},
        {"gsub", str_gsub},   {"rep", str_rep},     {NULL, NULL}};
    const luaL_Reg *f;
    idx = lua_absindex(L, idx);
    for (f = fns; f->name != NULL; f++) {
        lua_pushcfunction(L, f->func);
        lua_setfield(L, idx, f->name);
    }
}

/* ======================================================================== */
/* table (ltablib.c)                                                        */
/* ======================================================================== */

#define TAB_R  1
#define TAB_W  2
#define TAB_L  4
#define TAB_RW (TAB_R | TAB_W)

#define aux_getn(L, n, w) (checktab(L, n, (w) | TAB_L), luaL_len(L, n))

static int checkfield(lua_State *L, const char *key, int n)
{
    lua_pushstring(L, key);
    return (lua_rawget(L, -n) != LUA_TNIL);
}

static void checktab(lua_State *L, int arg, int what)
{
    if (lua_type(L, arg) != LUA_TTABLE) {
        int n = 1;
        if (lua_getmetatable(L, arg) &&
            (!(what & TAB_R) || checkfield(L, "__index", ++n)) &&
            (!(what & TAB_W) || checkfield(L, "__newindex", ++n)) &&
            (!(what & TAB_L) || checkfield(L, "__len", ++n))) {
            lua_pop(L, n);
        } else
            luaL_checktype(L, arg, LUA_TTABLE);
    }
}

/* rdmx: one element moved, read or compared costs 4 units (measured: a
 * lua_geti + lua_seti pair takes about as long as 4-10 VM instructions) */
typedef struct {
    lua_State *L;
    unsigned n;
} tcharge_t;

static inline void tstep(tcharge_t *c)
{
    if (l_unlikely(++c->n >= STEP_BATCH / 4)) {
        c->n = 0;
        rdmx__lambda_charge(c->L, STEP_BATCH);
    }
}

static int tinsert(lua_State *L)
{
    lua_Integer pos;
    lua_Integer e = aux_getn(L, 1, TAB_RW);
    tcharge_t c = {L, 0};
    e = (lua_Integer)((lua_Unsigned)e + 1u);
    switch (lua_gettop(L)) {
    case 2: {
        pos = e;
        break;
    }
    case 3: {
        lua_Integer i;
        pos = luaL_checkinteger(L, 2);
        luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)e, 2,
                      "position out of bounds");
        for (i = e; i > pos; i--) {
            tstep(&c);
            lua_geti(L, 1, i - 1);
            lua_seti(L, 1, i);
        }
        break;
    }
    default:
        return luaL_error(L, "wrong number of arguments to 'insert'");
    }
    lua_seti(L, 1, pos);
    rdmx__lambda_charge(L, 4 * (uint64_t)c.n + 1);
    return 0;
}

static int tremove(lua_State *L)
{
    lua_Integer size = aux_getn(L, 1, TAB_RW);
    lua_Integer pos = luaL_optinteger(L, 2, size);
    tcharge_t c = {L, 0};
    if (pos != size)
        luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 1,
                      "position out of bounds");
    lua_geti(L, 1, pos);
    for (; pos < size; pos++) {
        tstep(&c);
        lua_geti(L, 1, pos + 1);
        lua_seti(L, 1, pos);
    }
    lua_pushnil(L);
    lua_seti(L, 1, pos);
    rdmx__lambda_charge(L, 4 * (uint64_t)c.n + 1);
    return 1;
}

static int tmove(lua_State *L)
{
    lua_Integer f = luaL_checkinteger(L, 2);
    lua_Integer e = luaL_checkinteger(L, 3);
    lua_Integer t = luaL_checkinteger(L, 4);
    int tt = !lua_isnoneornil(L, 5) ? 5 : 1;
    tcharge_t c = {L, 0};
    checktab(L, 1, TAB_R);
    checktab(L, tt, TAB_W);
    if (e >= f) {
        lua_Integer n, i;
        luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3,
                      "too many elements to move");
        n = e - f + 1;
        luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4,
                      "destination wrap around");
        if (t > e || t <= f ||
            (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ))) {
            for (i = 0; i < n; i++) {
                tstep(&c);
                lua_geti(L, 1, f + i);
                lua_seti(L, tt, t + i);
            }
        } else {
            for (i = n - 1; i >= 0; i--) {
                tstep(&c);
                lua_geti(L, 1, f + i);
                lua_seti(L, tt, t + i);
            }
        }
    }
    rdmx__lambda_charge(L, 4 * (uint64_t)c.n + 1);
    lua_pushvalue(L, tt);
    return 1;
}

static void addfield(lua_State *L, luaL_Buffer *b, lua_Integer i)
{
    lua_geti(L, 1, i);
    if (l_unlikely(!lua_isstring(L, -1)))
        luaL_error(L, "invalid value (%s) at index %I in table for 'concat'",
                   luaL_typename(L, -1), (LUAI_UACINT)i);
    luaL_addvalue(b);
}

static int tconcat(lua_State *L)
{
    luaL_Buffer b;
    lua_Integer last = aux_getn(L, 1, TAB_R);
    size_t lsep;
    const char *sep = luaL_optlstring(L, 2, "", &lsep);
    lua_Integer i = luaL_optinteger(L, 3, 1);
    tcharge_t c = {L, 0};
    last = luaL_optinteger(L, 4, last);
    luaL_buffinit(L, &b);
    for (; i < last; i++) {
        tstep(&c);
        addfield(L, &b, i);
        luaL_addlstring(&b, sep, lsep);
    }
    if (i == last)
        addfield(L, &b, i);
    luaL_pushresult(&b);
    rdmx__lambda_charge(L, 4 * (uint64_t)c.n + 1);
    return 1;
}

static int tpack(lua_State *L)
{
    int i;
    int n = lua_gettop(L);
    rdmx__lambda_charge(L, (uint64_t)n + 1);
    lua_createtable(L, n, 1);
    lua_insert(L, 1);
    for (i = n; i >= 1; i--)
        lua_seti(L, 1, i);
    lua_pushinteger(L, n);
    lua_setfield(L, 1, "n");
    return 1;
}

static int tunpack(lua_State *L)
{
    lua_Unsigned n;
    lua_Integer i = luaL_optinteger(L, 2, 1);
    lua_Integer e = luaL_opt(L, luaL_checkinteger, 3, luaL_len(L, 1));
    tcharge_t c = {L, 0};
    if (i > e)
        return 0;
    n = (lua_Unsigned)e - (lua_Unsigned)i;
    if (l_unlikely(n >= (unsigned int)INT_MAX ||
                   !lua_checkstack(L, (int)(++n))))
        return luaL_error(L, "too many results to unpack");
    for (; i < e; i++) {
        tstep(&c);
        lua_geti(L, 1, i);
    }
    lua_geti(L, 1, e);
    rdmx__lambda_charge(L, 4 * (uint64_t)c.n + 1);
    return (int)n;
}

typedef unsigned int IdxT;

#define sof(e) (sizeof(e) / sizeof(unsigned int))

static unsigned int l_randomizePivot(void)
{
    clock_t c = clock();
    time_t t = time(NULL);
    unsigned int buff[sof(c) + sof(t)];
    unsigned int i, rnd = 0;
    memcpy(buff, &c, sof(c) * sizeof(unsigned int));
    memcpy(buff + sof(c), &t, sof(t) * sizeof(unsigned int));
    for (i = 0; i < sof(buff); i++)
        rnd += buff[i];
    return rnd;
}

#define RANLIMIT 100u

static void set2(lua_State *L, IdxT i, IdxT j)
{
    lua_seti(L, 1, i);
    lua_seti(L, 1, j);
}

static int sort_comp(lua_State *L, int a, int b, tcharge_t *c)
{
    tstep(c); /* rdmx */
    if (lua_isnil(L, 2))
        return lua_compare(L, a, b, LUA_OPLT);
    else {
        int res;
        lua_pushvalue(L, 2);
        lua_pushvalue(L, a - 1);
        lua_pushvalue(L, b - 2);
        lua_call(L, 2, 1);
        res = lua_toboolean(L, -1);
        lua_pop(L, 1);
        return res;
    }
}

static IdxT partition(lua_State *L, IdxT lo, IdxT up, tcharge_t *c)
{
    IdxT i = lo;
    IdxT j = up - 1;
    for (;;) {
        while ((void)lua_geti(L, 1, ++i), sort_comp(L, -1, -2, c)) {
            if (l_unlikely(i == up - 1))
                luaL_error(L, "invalid order function for sorting");
            lua_pop(L, 1);
        }
        while ((void)lua_geti(L, 1, --j), sort_comp(L, -3, -1, c)) {
            if (l_unlikely(j < i))
                luaL_error(L, "invalid order function for sorting");
            lua_pop(L, 1);
        }
        if (j < i) {
            lua_pop(L, 1);
            set2(L, up - 1, i);
            return i;
        }
        set2(L, i, j);
    }
}

static IdxT choosePivot(IdxT lo, IdxT up, unsigned int rnd)
{
    IdxT r4 = (up - lo) / 4;
    IdxT p = rnd % (r4 * 2) + (lo + r4);
    return p;
}

static void auxsort(lua_State *L, IdxT lo, IdxT up, unsigned int rnd,
                    tcharge_t *c)
{
    while (lo < up) {
        IdxT p;
        IdxT n;
        lua_geti(L, 1, lo);
        lua_geti(L, 1, up);
        if (sort_comp(L, -1, -2, c))
            set2(L, lo, up);
        else
            lua_pop(L, 2);
        if (up - lo == 1)
            return;
        if (up - lo < RANLIMIT || rnd == 0)
            p = (lo + up) / 2;
        else
            p = choosePivot(lo, up, rnd);
        lua_geti(L, 1, p);
        lua_geti(L, 1, lo);
        if (sort_comp(L, -2, -1, c))
            set2(L, p, lo);
        else {
            lua_pop(L, 1);
            lua_geti(L, 1, up);
            if (sort_comp(L, -1, -2, c))
                set2(L, p, up);
            else
                lua_pop(L, 2);
        }
        if (up - lo == 2)
            return;
        lua_geti(L, 1, p);
        lua_pushvalue(L, -1);
        lua_geti(L, 1, up - 1);
        set2(L, p, up - 1);
        p = partition(L, lo, up, c);
        if (p - lo < up - p) {
            auxsort(L, lo, p - 1, rnd, c);
            n = p - lo;
            lo = p + 1;
        } else {
            auxsort(L, p + 1, up, rnd, c);
            n = up - p;
            up = p - 1;
        }
        if ((up - lo) / 128 > n)
            rnd = l_randomizePivot();
    }
}

static int sort(lua_State *L)
{
    lua_Integer n = aux_getn(L, 1, TAB_RW);
    tcharge_t c = {L, 0};
    if (n > 1) {
        luaL_argcheck(L, n < INT_MAX, 1, "array too big");
        if (!lua_isnoneornil(L, 2))
            luaL_checktype(L, 2, LUA_TFUNCTION);
        lua_settop(L, 2);
        auxsort(L, 1, (IdxT)n, 0, &c);
    }
    rdmx__lambda_charge(L, 4 * (uint64_t)c.n + 1);
    return 0;
}

int rdmx__lambda_open_table(lua_State *L)
{
    static const luaL_Reg tab_funcs[] = {
        {"concat", tconcat}, {"insert", tinsert}, {"pack", tpack},
        {"unpack", tunpack}, {"remove", tremove}, {"move", tmove},
        {"sort", sort},      {NULL, NULL}};
    luaL_newlib(L, tab_funcs);
    return 1;
}
