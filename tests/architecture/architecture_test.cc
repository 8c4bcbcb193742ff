// The written boundaries are the real ones: ARCHITECTURE.md's dependency list (the ```deps block)
// against the DEPS every weft_library() declares in CMake (<build>/weft_library_deps.txt), and
// against the #include lines of every library's sources and headers. Fails naming the library and
// the file when they drift.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace weft {
namespace {

namespace fs = std::filesystem;
using Graph = std::map<std::string, std::set<std::string>>;

const fs::path kRoot = WEFT_SOURCE_DIR;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "name: dep dep" lines.
Graph parse_lines(const std::string& text) {
  Graph g;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream deps(line.substr(colon + 1));
    std::set<std::string>& d = g[line.substr(0, colon)];
    for (std::string x; deps >> x;) d.insert(x);
  }
  return g;
}

Graph documented() {
  const std::string md = read(kRoot / "ARCHITECTURE.md");
  const auto a = md.find("```deps\n");
  if (a == std::string::npos) return {};
  const auto b = md.find("```", a + 8);
  return parse_lines(md.substr(a + 8, b - a - 8));
}

std::set<std::string> closure(const Graph& g, const std::string& lib) {
  std::set<std::string> out;
  std::vector<std::string> todo{lib};
  while (!todo.empty()) {
    const std::string x = todo.back();
    todo.pop_back();
    auto it = g.find(x);
    if (it == g.end()) continue;
    for (const auto& d : it->second)
      if (out.insert(d).second) todo.push_back(d);
  }
  return out;
}

TEST(Architecture, TheDocumentedGraphIsTheCMakeGraph) {
  const Graph doc = documented();
  ASSERT_FALSE(doc.empty()) << "ARCHITECTURE.md has no ```deps block";
  const Graph cmake = parse_lines(read(fs::path(WEFT_BINARY_DIR) / "weft_library_deps.txt"));
  ASSERT_FALSE(cmake.empty());
  for (const auto& [lib, deps] : cmake) {
    auto it = doc.find(lib);
    ASSERT_NE(it, doc.end()) << "library " << lib << " is built but not in ARCHITECTURE.md's dependency list";
    EXPECT_EQ(deps, it->second) << "library " << lib << ": CMake DEPS differ from ARCHITECTURE.md";
  }
  for (const auto& [lib, deps] : doc) {
    const bool torch = lib == "runtime" || lib == "profiler" || lib == "runtime_base";
    if (!torch || WEFT_WITH_TORCH_BUILD) EXPECT_TRUE(cmake.count(lib)) << lib << " is documented but not built";
  }
}

// lib/<dir> holds the libraries whose name starts with <dir> (lib/runtime: runtime_base, runtime).
TEST(Architecture, LibrariesIncludeOnlyWhatTheyDependOn) {
  const Graph doc = documented();
  ASSERT_FALSE(doc.empty());
  const std::regex inc(R"re(#include\s+"weft/([a-z_]+)/)re");
  const std::regex local(R"re(#include\s+"([^"]+)")re");
  int files = 0;
  for (const auto& dir : fs::directory_iterator(kRoot / "lib")) {
    const std::string name = dir.path().filename().string();
    std::set<std::string> allowed{name};
    for (const auto& [lib, deps] : doc)
      if (lib == name || lib.rfind(name + "_", 0) == 0) {
        allowed.insert(lib);
        for (const auto& d : closure(doc, lib)) allowed.insert(d);
      }
    if (allowed.count("runtime_base")) allowed.insert("runtime");  // one include folder
    for (const auto& f : fs::recursive_directory_iterator(dir.path())) {
      const std::string ext = f.path().extension().string();
      if (ext != ".h" && ext != ".cc") continue;
      ++files;
      const std::string text = read(f.path());
      for (std::sregex_iterator m(text.begin(), text.end(), inc), e; m != e; ++m)
        EXPECT_TRUE(allowed.count((*m)[1].str()))
            << f.path().lexically_relative(kRoot).string() << " includes weft/" << (*m)[1].str()
            << "/, which lib/" << name << " does not depend on (ARCHITECTURE.md)";
      for (std::sregex_iterator m(text.begin(), text.end(), local), e; m != e; ++m)
        EXPECT_EQ((*m)[1].str().find(".."), std::string::npos)
            << f.path().lexically_relative(kRoot).string() << " includes " << (*m)[1].str() << " by a relative path";
    }
  }
  EXPECT_GT(files, 50);
}

TEST(Architecture, NoLibraryReachesIntoAnotherLibrarysSources) {
  const std::regex src(R"re(lib/([a-z_]+)/src)re");
  for (const auto& dir : fs::directory_iterator(kRoot / "lib")) {
    const std::string name = dir.path().filename().string();
    const std::string cmake = read(dir.path() / "CMakeLists.txt");
    for (std::sregex_iterator m(cmake.begin(), cmake.end(), src), e; m != e; ++m)
      EXPECT_EQ((*m)[1].str(), name) << "lib/" << name << "/CMakeLists.txt names lib/" << (*m)[1].str() << "/src";
  }
}

}  // namespace
}  // namespace weft
