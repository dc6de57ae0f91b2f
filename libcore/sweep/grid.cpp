#include "sweep/grid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>

#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/presets.hpp"
#include "util/error.hpp"

namespace icmlkit::sweep {

namespace {

namespace fs = std::filesystem;

void check_keys(const nlohmann::json& obj, const std::vector<std::string>& allowed, const std::string& where) {
  if (!obj.is_object()) throw InputError(fmt::format("{} must be a JSON object", where));
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end())
      throw InputError(fmt::format("{}: unknown key '{}' (known: {})", where, it.key(), fmt::join(allowed, ", ")));
}

double number(const nlohmann::json& j, const std::string& where) {
  if (!j.is_number()) throw InputError(fmt::format("{} must be a number", where));
  const double v = j.get<double>();
  if (!std::isfinite(v)) throw InputError(fmt::format("{} must be finite", where));
  return v;
}

std::int64_t integer(const nlohmann::json& j, const std::string& where, std::int64_t lo, std::int64_t hi) {
  const double v = number(j, where);
  if (v != std::floor(v) || v < static_cast<double>(lo) || v > static_cast<double>(hi))
    throw InputError(fmt::format("{} must be an integer in {}..{}, got {}", where, lo, hi, j.dump()));
  return static_cast<std::int64_t>(v);
}

std::string text(const nlohmann::json& j, const std::string& where) {
  if (!j.is_string() || j.get<std::string>().empty()) throw InputError(fmt::format("{} must be a non-empty string", where));
  return j.get<std::string>();
}

// Names become parts of cell ids and folder names: letters, digits, '_' and '-' only.
std::string checked_name(const std::string& n, const std::string& where) {
  if (n.empty() || n.size() > 64 ||
      !std::all_of(n.begin(), n.end(), [](unsigned char ch) { return std::isalnum(ch) || ch == '_' || ch == '-'; }))
    throw InputError(fmt::format("{}: name '{}' must be 1-64 letters, digits, '_' or '-' (it is part of cell ids and folder names)",
                                 where, n));
  return n;
}

std::string resolve(const std::string& p, const std::string& base_dir) {
  if (p.empty() || p == "-" || fs::path(p).is_absolute() || base_dir.empty()) return p;
  return (fs::path(base_dir) / p).lexically_normal().string();
}

const std::vector<std::string> kCorpusKeys{"format", "column", "doc_column", "field", "doc_field", "val_every"};

nlohmann::json corpus_options(const nlohmann::json& j, const std::string& where) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& k : kCorpusKeys)
    if (j.contains(k)) out[k] = j[k];
  if (out.contains("format")) {
    const auto f = text(out["format"], where + ".format");
    if (f != "auto" && f != "text" && f != "tsv" && f != "jsonl")
      throw InputError(fmt::format("{}.format must be auto, text, tsv or jsonl", where));
  }
  for (const char* k : {"column", "doc_column"})
    if (out.contains(k)) integer(out[k], where + "." + k, 0, 1000);
  if (out.contains("val_every")) integer(out["val_every"], where + ".val_every", 0, 1 << 30);
  for (const char* k : {"field", "doc_field"})
    if (out.contains(k)) text(out[k], where + "." + k);
  return out;
}

// The weights of a recipe, in bucket order: an array of one weight per bucket, or an object
// {bucket name: weight} (absent buckets 0).
std::vector<double> recipe_weights(const nlohmann::json& j, const std::vector<BucketSpec>& buckets,
                                   const std::string& where) {
  std::vector<double> w(buckets.size(), 0.0);
  if (j.is_array()) {
    if (j.size() != buckets.size())
      throw InputError(fmt::format("{} has {} weights for {} buckets", where, j.size(), buckets.size()));
    for (std::size_t i = 0; i < j.size(); ++i) w[i] = number(j[i], fmt::format("{}[{}]", where, i));
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const auto b = std::find_if(buckets.begin(), buckets.end(), [&](const BucketSpec& s) { return s.name == it.key(); });
      if (b == buckets.end()) throw InputError(fmt::format("{}: no bucket named '{}'", where, it.key()));
      w[static_cast<std::size_t>(b - buckets.begin())] = number(it.value(), where + "." + it.key());
    }
  } else {
    throw InputError(fmt::format("{} must be an array of weights or an object {{bucket: weight}}", where));
  }
  double sum = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] < 0 || w[i] > 1)
      throw InputError(fmt::format("{}: weight of bucket '{}' is {}, outside [0, 1]", where, buckets[i].name, w[i]));
    sum += w[i];
  }
  if (std::abs(sum - 1) > 1e-6) throw InputError(fmt::format("{}: weights sum to {:.9g}, not 1", where, sum));
  return w;
}

void check_train_values(const nlohmann::json& t, const std::string& where) {
  for (auto it = t.begin(); it != t.end(); ++it) {
    const std::string tw = where + "." + it.key();
    if (it.key() == "tied") {
      if (!it.value().is_boolean()) throw InputError(tw + " must be true or false");
    } else if (it.key() == "seq_len" || it.key() == "batch" || it.key() == "accum" || it.key() == "warmup") {
      integer(it.value(), tw, it.key() == "warmup" ? 0 : 1, 1 << 20);
    } else if (!(number(it.value(), tw) >= 0)) {
      throw InputError(tw + " must be >= 0");
    }
  }
}

std::string tokens_label(std::int64_t t) { return std::to_string(t); }

std::string epochs_label(const std::optional<double>& e) {
  if (!e) return "nat";
  return io::format_double(*e);
}

}  // namespace

const std::vector<std::string>& allowed_train_keys() {
  static const std::vector<std::string> k{"seq_len", "batch",  "accum", "lr",       "min_lr",   "warmup",
                                          "weight_decay", "beta1", "beta2", "adam_eps", "clip", "init_std",
                                          "tied"};
  return k;
}

Grid parse_grid(const nlohmann::json& j, const std::string& where, const std::string& base_dir) {
  Grid g;
  g.raw = j;
  check_keys(j, {"name", "description", "data", "models", "train", "recipes", "cells"}, where);
  g.name = j.contains("name") ? text(j["name"], where + ": name") : "sweep";
  for (const char* k : {"data", "models", "recipes", "cells"})
    if (!j.contains(k)) throw InputError(fmt::format("{}: no \"{}\" section", where, k));

  // data
  const auto& d = j["data"];
  const std::string dw = where + ": data";
  check_keys(d, {"source", "unit", "seed", "tokenizer", "buckets", "validation", "val_tokens"}, dw);
  if (d.contains("source")) {
    const auto& s = d["source"];
    if (s.is_string()) {
      g.data.source = resolve(text(s, dw + ".source"), base_dir);
      g.data.source_corpus = nlohmann::json::object();
    } else {
      check_keys(s, [] { auto k = kCorpusKeys; k.push_back("path"); return k; }(), dw + ".source");
      if (!s.contains("path")) throw InputError(dw + ".source: no \"path\"");
      g.data.source = resolve(text(s["path"], dw + ".source.path"), base_dir);
      g.data.source_corpus = corpus_options(s, dw + ".source");
    }
  }
  if (d.contains("unit")) {
    g.data.unit = text(d["unit"], dw + ".unit");
    if (g.data.unit != "line" && g.data.unit != "document")
      throw InputError(fmt::format("{}.unit must be \"line\" or \"document\", got '{}'", dw, g.data.unit));
  }
  if (d.contains("seed")) g.data.seed = static_cast<std::uint64_t>(integer(d["seed"], dw + ".seed", 0, std::int64_t(1) << 53));
  if (d.contains("tokenizer")) {
    const auto& t = d["tokenizer"];
    check_keys(t, {"vocab_size", "path"}, dw + ".tokenizer");
    if (t.contains("path")) g.data.tokenizer = resolve(text(t["path"], dw + ".tokenizer.path"), base_dir);
    if (t.contains("vocab_size")) g.data.vocab_size = static_cast<int>(integer(t["vocab_size"], dw + ".tokenizer.vocab_size", 260, 1 << 20));
  }
  if (d.contains("val_tokens")) g.data.val_tokens = integer(d["val_tokens"], dw + ".val_tokens", 0, std::int64_t(1) << 50);
  if (!d.contains("buckets") || !d["buckets"].is_array() || d["buckets"].empty())
    throw InputError(dw + ": \"buckets\" must be a non-empty array");
  double share_sum = 0;
  bool any_made = false;
  std::set<std::string> names;
  for (std::size_t i = 0; i < d["buckets"].size(); ++i) {
    const auto& b = d["buckets"][i];
    const std::string bw = fmt::format("{}.buckets[{}]", dw, i);
    check_keys(b, [] { auto k = kCorpusKeys; for (const char* x : {"name", "share", "replace", "shuffle", "path"}) k.push_back(x); return k; }(), bw);
    BucketSpec s;
    s.name = b.contains("name") ? checked_name(text(b["name"], bw + ".name"), bw) : fmt::format("q{}", i);
    if (!names.insert(s.name).second) throw InputError(fmt::format("{}: bucket name '{}' is used twice", bw, s.name));
    if (b.contains("path")) {
      s.path = resolve(text(b["path"], bw + ".path"), base_dir);
      s.corpus = corpus_options(b, bw);
      for (const char* k : {"share", "replace", "shuffle"})
        if (b.contains(k)) throw InputError(fmt::format("{}: a bucket read from a file takes no \"{}\" (it is used as it is)", bw, k));
    } else {
      for (const auto& k : kCorpusKeys)
        if (b.contains(k)) throw InputError(fmt::format("{}: \"{}\" belongs to data.source (this bucket is made from it)", bw, k));
      any_made = true;
      if (!b.contains("share")) throw InputError(bw + ": a made bucket needs a \"share\" of the source");
      s.share = number(b["share"], bw + ".share");
      if (!(s.share > 0 && s.share <= 1)) throw InputError(fmt::format("{}.share must be in (0, 1], got {}", bw, s.share));
      share_sum += s.share;
      if (b.contains("replace")) {
        s.replace = number(b["replace"], bw + ".replace");
        if (s.replace < 0 || s.replace > 1) throw InputError(fmt::format("{}.replace must be in [0, 1], got {}", bw, s.replace));
      }
      if (b.contains("shuffle")) {
        if (!b["shuffle"].is_boolean()) throw InputError(bw + ".shuffle must be true or false");
        s.shuffle = b["shuffle"].get<bool>();
      }
    }
    g.data.buckets.push_back(std::move(s));
  }
  if (any_made) {
    if (g.data.source.empty()) throw InputError(dw + ": made buckets (with a \"share\") need data.source");
    if (std::abs(share_sum - 1) > 1e-6)
      throw InputError(fmt::format("{}: the made buckets' shares sum to {:.9g}, not 1", dw, share_sum));
  }
  g.data.validation = d.contains("validation") ? text(d["validation"], dw + ".validation") : g.data.buckets[0].name;
  if (!names.count(g.data.validation))
    throw InputError(fmt::format("{}.validation: no bucket named '{}'", dw, g.data.validation));

  // train
  if (j.contains("train")) {
    check_keys(j["train"], allowed_train_keys(), where + ": train");
    g.train = j["train"];
    check_train_values(g.train, where + ": train");
  }
  g.seq_len = g.train.contains("seq_len") ? g.train["seq_len"].get<int>() : 128;

  // models
  check_keys(j["models"], [&] {
    std::vector<std::string> k;
    for (auto it = j["models"].begin(); it != j["models"].end(); ++it) k.push_back(it.key());
    return k;
  }(), where + ": models");
  if (j["models"].empty()) throw InputError(where + ": \"models\" is empty");
  for (auto it = j["models"].begin(); it != j["models"].end(); ++it) {
    const std::string mw = where + ": models." + it.key();
    checked_name(it.key(), where + ": models");
    check_keys(it.value(), {"preset", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "train"}, mw);
    ModelSpec m;
    m.name = it.key();
    m.json = it.value();
    if (it.value().contains("train")) {
      std::vector<std::string> keys;
      for (const auto& k : allowed_train_keys())
        if (k != "seq_len" && k != "tied") keys.push_back(k);
      check_keys(it.value()["train"], keys, mw + ".train");
      m.train = it.value()["train"];
      check_train_values(m.train, mw + ".train");
    }
    m.config = lm::default_shape();
    const auto& v = it.value();
    auto is_set = [&](const char* flag) {
      std::string k = std::string(flag).substr(2);
      std::replace(k.begin(), k.end(), '-', '_');
      return v.contains(k);
    };
    if (v.contains("preset")) {
      const auto p = text(v["preset"], mw + ".preset");
      try {
        lm::apply_preset(p, m.config, is_set);
      } catch (const UsageError&) {
        throw InputError(fmt::format("{}.preset: unknown preset '{}' (tiny, 7m, 100m)", mw, p));
      }
    } else {
      for (const char* k : {"d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"})
        if (!v.contains(k)) throw InputError(fmt::format("{}: no \"{}\" (or give a \"preset\")", mw, k));
    }
    if (v.contains("d_model")) m.config.d_model = static_cast<int>(integer(v["d_model"], mw + ".d_model", 2, 1 << 16));
    if (v.contains("n_layers")) m.config.n_layers = static_cast<int>(integer(v["n_layers"], mw + ".n_layers", 1, 1024));
    if (v.contains("n_heads")) m.config.n_heads = static_cast<int>(integer(v["n_heads"], mw + ".n_heads", 1, 1024));
    if (v.contains("n_kv_heads")) m.config.n_kv_heads = static_cast<int>(integer(v["n_kv_heads"], mw + ".n_kv_heads", 1, 1024));
    if (v.contains("d_ff")) m.config.d_ff = static_cast<int>(integer(v["d_ff"], mw + ".d_ff", 1, 1 << 18));
    if (m.config.d_model % m.config.n_heads != 0 || (m.config.d_model / m.config.n_heads) % 2 != 0)
      throw InputError(fmt::format("{}: d_model {} must be n_heads {} x an even head width", mw, m.config.d_model, m.config.n_heads));
    if (m.config.n_heads % m.config.n_kv_heads != 0)
      throw InputError(fmt::format("{}: n_kv_heads {} must divide n_heads {}", mw, m.config.n_kv_heads, m.config.n_heads));
    m.config.n_ctx = g.seq_len;
    m.config.tied = g.train.contains("tied") && g.train["tied"].get<bool>();
    g.models[m.name] = std::move(m);
  }

  // recipes
  if (!j["recipes"].is_object() || j["recipes"].empty()) throw InputError(where + ": \"recipes\" must be a non-empty object");
  std::map<std::string, std::string> bad_recipes;  // name -> the problem, reported with a cell that uses it
  for (auto it = j["recipes"].begin(); it != j["recipes"].end(); ++it) {
    checked_name(it.key(), where + ": recipes");
    try {
      g.recipes[it.key()] = recipe_weights(it.value(), g.data.buckets, "recipes." + it.key());
    } catch (const InputError& e) {
      bad_recipes[it.key()] = e.message();
      g.recipes[it.key()] = {};
    }
  }

  // cells
  if (!j["cells"].is_array() || j["cells"].empty()) throw InputError(where + ": \"cells\" must be a non-empty array of blocks");
  std::map<std::string, std::size_t> seen;
  // One optimizer step of model m, in tokens (its own batch and accum when it overrides them).
  auto step_tokens = [&](const ModelSpec& m) {
    auto opt = [&](const char* k, int dflt) {
      return m.train.contains(k) ? m.train[k].get<int>() : g.train.contains(k) ? g.train[k].get<int>() : dflt;
    };
    return static_cast<std::int64_t>(opt("batch", 8)) * opt("accum", 1) * g.seq_len;
  };
  for (std::size_t bi = 0; bi < j["cells"].size(); ++bi) {
    const auto& b = j["cells"][bi];
    const std::string bw = fmt::format("{}: cells[{}]", where, bi);
    check_keys(b, {"role", "models", "tokens", "recipes", "epochs", "seeds"}, bw);
    auto list = [&](const char* k) {
      if (!b.contains(k)) throw InputError(fmt::format("{}: no \"{}\"", bw, k));
      nlohmann::json l = b[k].is_array() ? b[k] : nlohmann::json::array({b[k]});
      if (l.empty()) throw InputError(fmt::format("{}.{} is empty", bw, k));
      return l;
    };
    const std::string role = b.contains("role") ? text(b["role"], bw + ".role") : "fit";
    const auto models = list("models"), tokens = list("tokens"), recipes = list("recipes");
    const nlohmann::json epochs = b.contains("epochs") ? list("epochs") : nlohmann::json::array({nullptr});
    const nlohmann::json seeds = b.contains("seeds") ? list("seeds") : nlohmann::json::array({1});
    for (const auto& mj : models) {
      const auto m = text(mj, bw + ".models[]");
      if (!g.models.count(m)) throw InputError(fmt::format("{}: no model named '{}'", bw, m));
      for (const auto& rj : recipes) {
        const auto r = text(rj, bw + ".recipes[]");
        if (!g.recipes.count(r)) throw InputError(fmt::format("{}: no recipe named '{}'", bw, r));
        for (const auto& tj : tokens) {
          const auto t = integer(tj, bw + ".tokens[]", 1, std::int64_t(100000000000));
          for (const auto& ej : epochs) {
            std::optional<double> e;
            if (!ej.is_null()) {
              e = number(ej, bw + ".epochs[]");
              if (!(*e >= 1)) throw InputError(fmt::format("{}: epochs {} is below 1 (a cell cannot see its unique tokens less than once)", bw, *e));
            }
            for (const auto& sj : seeds) {
              Cell c;
              c.index = g.cells.size();
              c.role = role;
              c.model = m;
              c.recipe = r;
              c.tokens = t;
              c.epochs = e;
              c.seed = static_cast<std::uint64_t>(integer(sj, bw + ".seeds[]", 0, std::int64_t(1) << 53));
              c.id = fmt::format("{}.{}.D{}.E{}.s{}", m, r, tokens_label(t), epochs_label(e), c.seed);
              if (t < step_tokens(g.models.at(m)))
                throw InputError(fmt::format("cell {}: {} tokens are less than one optimizer step (batch x accum x seq_len = {})",
                                             c.id, t, step_tokens(g.models.at(m))));
              if (const auto s = seen.find(c.id); s != seen.end())
                throw InputError(fmt::format("{}: cell {} is already in the grid (cell {})", bw, c.id, s->second));
              seen[c.id] = c.index;
              g.cells.push_back(std::move(c));
            }
          }
        }
      }
    }
  }
  for (const auto& [name, problem] : bad_recipes) {
    const auto c = std::find_if(g.cells.begin(), g.cells.end(), [&](const Cell& x) { return x.recipe == name; });
    if (c == g.cells.end()) throw InputError(fmt::format("{}: {}", where, problem));
    const auto uses = std::count_if(g.cells.begin(), g.cells.end(), [&](const Cell& x) { return x.recipe == name; });
    throw InputError(fmt::format("{}: cell {}{}: {}", where, c->id,
                                 uses > 1 ? fmt::format(" (and {} more)", uses - 1) : std::string(), problem));
  }
  return g;
}

Grid read_grid(const std::string& path) {
  const nlohmann::json j = io::read_json(path);
  const auto base = fs::path(path).parent_path().string();
  return parse_grid(j, path, base);
}

std::string data_spec_sha256(const Grid& g) {
  nlohmann::json j;
  // Files by content, not by path: the same grid reached by another path is the same data.
  auto content = [](const std::string& path) { return path.empty() ? std::string() : io::sha256_file(path); };
  j["source"] = content(g.data.source);
  j["source_corpus"] = g.data.source_corpus;
  j["unit"] = g.data.unit;
  j["seed"] = g.data.seed;
  j["vocab_size"] = g.data.vocab_size;
  j["tokenizer"] = content(g.data.tokenizer);
  j["validation"] = g.data.validation;
  j["val_tokens"] = g.data.val_tokens;
  nlohmann::json b = nlohmann::json::array();
  for (const auto& s : g.data.buckets)
    b.push_back({{"name", s.name}, {"share", s.share}, {"replace", s.replace}, {"shuffle", s.shuffle},
                 {"path", content(s.path)}, {"corpus", s.corpus}});
  j["buckets"] = b;
  return io::sha256_hex(j.dump());
}

std::vector<std::string> model_args(const ModelSpec& m, int seq_len) {
  const auto& c = m.config;
  return {"--d-model", std::to_string(c.d_model), "--n-layers", std::to_string(c.n_layers),
          "--n-heads", std::to_string(c.n_heads), "--n-kv-heads", std::to_string(c.n_kv_heads),
          "--d-ff", std::to_string(c.d_ff), "--n-ctx", std::to_string(seq_len)};
}

std::vector<std::string> train_args(const Grid& g, const ModelSpec& m) {
  std::vector<std::string> out;
  for (const auto& k : allowed_train_keys()) {
    if (!g.train.contains(k) && !m.train.contains(k)) continue;
    std::string flag = "--" + k;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const auto& v = m.train.contains(k) ? m.train[k] : g.train[k];
    if (v.is_boolean()) {
      if (v.get<bool>()) out.push_back(flag);
      continue;
    }
    out.push_back(flag);
    out.push_back(v.is_number_integer() ? std::to_string(v.get<std::int64_t>()) : io::format_double(v.get<double>()));
  }
  return out;
}

}  // namespace icmlkit::sweep
