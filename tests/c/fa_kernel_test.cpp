// fa_kernel_test.cpp -- ggml's CPU flash attention (with native/patches/ggml-cpu-fa-blocked-decode.patch
// and ggml-cpu-fa-grouped-rows.patch) against attention computed in double precision from the same
// rounded inputs.
//
// Invariant checked: for one query row per head (decode) and for 1 to 63 rows (a short prompt, a
// draft), at cache depths from 256 to 3000 cells, F16 and F32 caches, sliding windows, masks with
// holes, GQA ratios 1, 4, 7 and 8, with grouped-query
// heads, several sequences, masked cells (a whole masked block included), logit soft-capping,
// ALiBi slopes, attention sinks and 1, 2 or 3 threads (ggml's split-KV path and its per-row path), every output value is
// within `tol` of the exact result. The blocked path sums in F32 (measured error < 1e-6), so
// its tolerance is tight enough that dropping one cell of a thousand fails; the per-cell loop
// it leaves in place keeps an F16 accumulator (measured error ~2e-3), and is held to F16's
// precision.
//
// Usage: el_fa_kernel_test   (exit 0 when every case passes; one line per case)

#include "ggml-cpu.h"
#include "ggml.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

struct Case {
    const char * name;
    int   d;         // values per head (K and V)
    int   heads;     // query heads
    int   kv_heads;  // K/V heads (grouped-query attention when fewer)
    int   rows;      // query rows per head
    int   cells;     // cache cells
    int   valid;     // cells not masked (the rest are -inf, as an unused cache tail is)
    int   streams;   // sequences, each with its own cache (llama.cpp's non-unified cache)
    float softcap;
    int   threads;
    float tol;       // max |error| allowed
    bool  f32  = false;  // K and V in F32 instead of F16
    int   window = 0;    // sliding window: a row sees only its last `window` cells (0: all)
    bool  holes = false; // every 9th cell masked for every row (cells of other sequences)
    float max_bias = 0;  // ALiBi: visible cells carry -distance/100 in the mask, scaled per head
    bool  sinks = false; // attention sinks: one logit per head in the denominator only
    bool  no_mask = false; // no mask tensor at all: every cell seen (valid must equal cells)
};

// ALiBi's slope for head h, as ggml derives it from max_bias.
double alibi_slope(const Case & c, int h) {
    if (c.max_bias <= 0) {
        return 1.0;
    }
    const int    n_log2 = 1 << (int) std::floor(std::log2((double) c.heads));
    const double m0 = std::pow(2.0, -(double) c.max_bias / n_log2), m1 = std::pow(2.0, -(double) c.max_bias / 2.0 / n_log2);
    return h < n_log2 ? std::pow(m0, h + 1) : std::pow(m1, 2 * (h - n_log2) + 1);
}

float sink_of(int h) { return 0.5f + 0.25f * (float) (h % 5); }

float round_f16(float x) { return ggml_fp16_to_fp32(ggml_fp32_to_fp16(x)); }

// Exact attention of one query row over its cells, from the rounded inputs ggml reads (the CPU
// kernel rounds Q to F16 for its K dot with an F16 cache, and keeps it F32 with an F32 one).
void reference(const Case & c, const std::vector<float> & q, const std::vector<float> & k, const std::vector<float> & v,
               const std::vector<float> & mask, int s, int h, int r, std::vector<double> & out) {
    const int    hk    = h / (c.heads / c.kv_heads);
    const double scale = 1.0 / std::sqrt((double) c.d) / (c.softcap != 0 ? c.softcap : 1.0);
    std::vector<double> p(c.cells, 0.0);
    double m = -INFINITY;
    for (int i = 0; i < c.cells; i++) {
        const float mv = mask[((size_t) s * c.rows + r) * c.cells + i];
        if (mv == -INFINITY) {
            p[i] = -INFINITY;
            continue;
        }
        double dot = 0;
        for (int j = 0; j < c.d; j++) {
            const float qj = q[(((size_t) s * c.heads + h) * c.rows + r) * c.d + j];
            dot += (double) (c.f32 ? qj : round_f16(qj)) *
                   k[(((size_t) s * c.kv_heads + hk) * c.cells + i) * c.d + j];
        }
        double x = dot * scale;
        if (c.softcap != 0) {
            x = c.softcap * std::tanh(x);
        }
        p[i] = x + alibi_slope(c, h) * mv;
        m    = std::max(m, p[i]);
    }
    double sum = 0;
    if (c.sinks) {  // the sink joins the maximum and the denominator, never the values
        m   = std::max(m, (double) sink_of(h));
        sum = std::exp(sink_of(h) - m);
    }
    for (double & x : p) {
        x = x == -INFINITY ? 0.0 : std::exp(x - m);
        sum += x;
    }
    out.assign(c.d, 0.0);
    for (int i = 0; i < c.cells; i++) {
        for (int j = 0; j < c.d; j++) {
            out[j] += p[i] / sum * v[(((size_t) s * c.kv_heads + hk) * c.cells + i) * c.d + j];
        }
    }
}

// Fill an F16 tensor laid out [d, cells, heads, streams] from `src` in the same order.
void put_f16(ggml_tensor * t, const std::vector<float> & src) {
    auto * dst = (ggml_fp16_t *) t->data;
    for (size_t i = 0; i < src.size(); i++) {
        dst[i] = ggml_fp32_to_fp16(src[i]);
    }
}

bool run(const Case & c, std::mt19937 & rng) {
    std::normal_distribution<float>       gauss(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    // Q and K are N(0, 1) scaled so that scores spread over several units, as in a model.
    std::vector<float> q((size_t) c.d * c.rows * c.heads * c.streams), k((size_t) c.d * c.cells * c.kv_heads * c.streams),
        v(k.size()), mask((size_t) c.cells * c.rows * c.streams);
    for (float & x : q) x = 2.0f * gauss(rng);
    for (float & x : k) x = round_f16(gauss(rng));
    for (float & x : v) x = round_f16(uni(rng));
    for (int s = 0; s < c.streams; s++) {
        for (int r = 0; r < c.rows; r++) {
            for (int i = 0; i < c.cells; i++) {
                // The last rows see a few more cells (causal), the tail is unused cache.
                const int  seen    = c.no_mask ? c.cells : c.valid - (c.rows - 1 - r);
                const bool visible = i < seen && (c.window == 0 || i >= seen - c.window) && !(c.holes && i % 9 == 4);
                const float near = c.max_bias > 0 ? round_f16(-0.01f * (float) (seen - 1 - i)) : 0.0f;
                mask[((size_t) s * c.rows + r) * c.cells + i] = visible ? near : -INFINITY;
            }
        }
    }

    ggml_init_params ip = {(size_t) 256 << 20, nullptr, false};
    ggml_context *   ctx = ggml_init(ip);
    ggml_tensor *    tq  = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.d, c.rows, c.heads, c.streams);
    const ggml_type  kv  = c.f32 ? GGML_TYPE_F32 : GGML_TYPE_F16;
    ggml_tensor *    tk  = ggml_new_tensor_4d(ctx, kv, c.d, c.cells, c.kv_heads, c.streams);
    ggml_tensor *    tv  = ggml_new_tensor_4d(ctx, kv, c.d, c.cells, c.kv_heads, c.streams);
    ggml_tensor *    tm  = c.no_mask ? nullptr : ggml_new_tensor_4d(ctx, GGML_TYPE_F16, c.cells, c.rows, 1, c.streams);
    std::copy(q.begin(), q.end(), (float *) tq->data);
    if (c.f32) {  // the values are F16-rounded already: the same inputs either way
        std::copy(k.begin(), k.end(), (float *) tk->data);
        std::copy(v.begin(), v.end(), (float *) tv->data);
    } else {
        put_f16(tk, k);
        put_f16(tv, v);
    }
    if (tm) {
        put_f16(tm, mask);
    }
    const float   scale = 1.0f / std::sqrt((float) c.d);
    ggml_tensor * out   = ggml_flash_attn_ext(ctx, tq, tk, tv, tm, scale, c.max_bias, c.softcap);
    if (c.sinks) {
        ggml_tensor * ts = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, c.heads);
        for (int h = 0; h < c.heads; h++) {
            ((float *) ts->data)[h] = sink_of(h);
        }
        ggml_flash_attn_ext_add_sinks(out, ts);
    }
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    if (ggml_graph_compute_with_ctx(ctx, gf, c.threads) != GGML_STATUS_SUCCESS) {
        std::printf("FAIL %s: compute failed\n", c.name);
        ggml_free(ctx);
        return false;
    }

    // out: [d, heads, rows, streams]
    double              worst = 0;
    std::vector<double> want;
    for (int s = 0; s < c.streams; s++) {
        for (int h = 0; h < c.heads; h++) {
            for (int r = 0; r < c.rows; r++) {
                reference(c, q, k, v, mask, s, h, r, want);
                const float * got = (const float *) out->data + (((size_t) s * c.rows + r) * c.heads + h) * c.d;
                for (int j = 0; j < c.d; j++) {
                    worst = std::max(worst, std::fabs(got[j] - want[j]));
                }
            }
        }
    }
    ggml_free(ctx);
    const bool ok = worst <= c.tol;
    std::printf("%s %s: max |error| %.2e (allowed %.0e)\n", ok ? "ok  " : "FAIL", c.name, worst, (double) c.tol);
    return ok;
}

}  // namespace

int main() {
    // Blocked path: heads of 64 (qwen2.5, smollm2) and 128 values. Per-cell loop: heads of 256
    // (gemma-3).
    const Case cases[] = {
        {"decode, qwen2.5 heads, 1024 cells, 1 thread", 64, 14, 2, 1, 1024, 1000, 1, 0.0f, 1, 1e-5f},
        {"decode, qwen2.5 heads, 2048 cells, split across 2 threads", 64, 14, 2, 1, 2048, 1917, 1, 0.0f, 2, 1e-5f},
        {"decode, 4 sequences in one step, 3 threads", 64, 14, 2, 1, 768, 700, 4, 0.0f, 3, 1e-5f},
        {"decode, a whole block masked at the end, soft-capped", 128, 8, 8, 1, 1024, 520, 2, 30.0f, 2, 1e-5f},
        {"short prompt (7 rows) at depth", 64, 14, 2, 7, 1536, 1400, 1, 0.0f, 2, 1e-5f},
        {"decode, 256 cells", 64, 14, 2, 1, 256, 200, 1, 0.0f, 2, 1e-5f},
        {"per-cell loop: gemma-3 heads of 256", 256, 4, 1, 1, 1024, 900, 1, 0.0f, 2, 5e-3f},
        // Short batches (issue 55): GQA ratios 1, 4, 7, 8; 1 to 63 rows; F16 and F32 caches;
        // masks with holes and sliding windows; head sizes 64 and 128 (256 keeps the per-cell loop).
        {"short batch: GQA 7, 21 rows at depth, holes", 64, 14, 2, 21, 2100, 2000, 1, 0.0f, 2, 1e-5f, false, 0, true},
        {"short batch: GQA 4, 63 rows, F32 cache", 64, 8, 2, 63, 1200, 1100, 1, 0.0f, 2, 1e-5f, true},
        {"short batch: GQA 8, 2 rows, sliding window 128", 128, 8, 1, 2, 1500, 1400, 1, 0.0f, 2, 1e-5f, false, 128},
        {"short batch: GQA 1, 33 rows, soft-capped, window and holes", 64, 4, 4, 33, 900, 850, 2, 30.0f, 2, 1e-5f, false, 300, true},
        {"short batch: GQA 7, 8 rows (a draft), 1 thread, F32", 64, 14, 2, 8, 2048, 2000, 1, 0.0f, 1, 1e-5f, true},
        {"short batch: GQA 4, 1 row, 3 threads, window", 128, 16, 4, 1, 3000, 2990, 1, 0.0f, 3, 1e-5f, false, 512},
        {"per-cell loop: heads of 256, 16 rows, GQA 4", 256, 8, 2, 16, 700, 650, 1, 0.0f, 2, 5e-3f},
        // ALiBi slopes and attention sinks, in short batches and in decode (split across threads).
        {"short batch: ALiBi, GQA 4, 12 rows, holes", 64, 8, 2, 12, 1300, 1250, 1, 0.0f, 2, 1e-5f, false, 0, true, 8.0f},
        {"short batch: sinks, GQA 7, 5 rows, window", 64, 14, 2, 5, 1100, 1000, 1, 0.0f, 2, 1e-5f, false, 200, false, 0.0f, true},
        {"decode: ALiBi, GQA 7, split across 2 threads", 64, 14, 2, 1, 2048, 2000, 1, 0.0f, 2, 1e-5f, false, 0, false, 8.0f},
        {"decode: sinks and ALiBi, GQA 4, split across 2 threads", 128, 8, 2, 1, 1024, 1000, 1, 0.0f, 2, 1e-5f, false, 0, false, 4.0f, true},
        // No mask tensor (every cell seen; the last tile's unused cells are the kernel's to hide),
        // and heads of 80 values (a GEMM width that is not a multiple of its 64-wide kernel).
        {"short batch: no mask, GQA 7, 9 rows, 1000 cells", 64, 14, 2, 9, 1000, 1000, 1, 0.0f, 2, 1e-5f, false, 0, false, 0.0f, false, true},
        {"decode: no mask, GQA 7, 1000 cells", 64, 14, 2, 1, 1000, 1000, 1, 0.0f, 2, 1e-5f, false, 0, false, 0.0f, false, true},
        {"short batch: heads of 80, GQA 4, 11 rows, holes", 80, 8, 2, 11, 1100, 1050, 1, 0.0f, 2, 1e-5f, false, 0, true},
    };
    std::mt19937 rng(1234);
    int          failed = 0;
    for (const Case & c : cases) {
        failed += run(c, rng) ? 0 : 1;
    }
    std::printf("%d failed\n", failed);
    return failed == 0 ? 0 : 1;
}
