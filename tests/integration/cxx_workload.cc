/*
 * cxx_workload.cc - a C++ program that allocates through operator new.
 *
 * Run by preload_tools.sh with and without libucma-preload.so; the output
 * must be the same.  libstdc++'s operator new and delete call malloc and
 * free, and the over-aligned forms call aligned_alloc, so every container
 * here exercises the interposer: std::vector, std::string, std::map,
 * std::unordered_map, std::list, std::shared_ptr, arrays from new[],
 * over-aligned objects and exceptions (whose objects libstdc++ allocates
 * with malloc too).
 *
 * SPDX-License-Identifier: MIT
 */
#include <cstdint>
#include <cstdio>
#include <list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h;
}

std::uint64_t hash_string(const std::string &s)
{
	std::uint64_t h = 1469598103934665603ull;

	for (unsigned char c : s) {
		h ^= c;
		h *= 1099511628211ull;
	}
	return h;
}

struct alignas(128) Wide {
	std::uint64_t v[16];
};

struct Node {
	std::string name;
	std::vector<int> values;
	std::shared_ptr<Node> next;
};

std::uint64_t strings_and_maps()
{
	std::map<std::string, std::vector<int>> index;
	std::unordered_map<std::uint64_t, std::string> by_hash;
	std::uint64_t h = 0;

	for (int i = 0; i < 60000; i++) {
		std::string key = "key-" + std::to_string(i % 7919) + "-" +
				  std::string(static_cast<std::size_t>(i % 37), 'x');
		index[key].push_back(i);
		by_hash[hash_string(key)] = key;
	}
	for (const auto &kv : index) {
		h = mix(h, hash_string(kv.first));
		for (int v : kv.second)
			h = mix(h, static_cast<std::uint64_t>(v));
	}
	std::string text;
	for (const auto &kv : by_hash)
		text += kv.second.substr(0, 3);	/* order-independent content */
	h = mix(h, text.size());
	h = mix(h, index.size());
	h = mix(h, by_hash.size());
	return h;
}

std::uint64_t vectors_and_lists()
{
	std::vector<std::vector<std::uint64_t>> rows;
	std::list<std::string> words;
	std::uint64_t h = 0;

	for (int i = 0; i < 3000; i++) {
		rows.emplace_back(static_cast<std::size_t>(i % 500 + 1), static_cast<std::uint64_t>(i));
		words.push_back(std::string(static_cast<std::size_t>(i % 200), static_cast<char>('a' + i % 26)));
		if (i % 3 == 0)
			words.pop_front();
	}
	rows.resize(1000);
	rows.shrink_to_fit();
	for (const auto &r : rows)
		for (auto v : r)
			h = mix(h, v);
	for (const auto &w : words)
		h = mix(h, hash_string(w));
	return h;
}

std::uint64_t arrays_and_alignment()
{
	std::uint64_t h = 0;

	for (int round = 0; round < 200; round++) {
		std::size_t n = static_cast<std::size_t>(round * 97 % 20000 + 1);
		auto *a = new std::uint64_t[n];
		for (std::size_t i = 0; i < n; i++)
			a[i] = i * static_cast<std::size_t>(round);
		h = mix(h, a[n - 1]);
		delete[] a;

		auto *w = new Wide[4];
		if (reinterpret_cast<std::uintptr_t>(w) % alignof(Wide) != 0)
			h = mix(h, 0xbad);	/* changes the output: misaligned */
		w[3].v[15] = static_cast<std::uint64_t>(round);
		h = mix(h, w[3].v[15]);
		delete[] w;
	}
	return h;
}

std::uint64_t shared_chain()
{
	std::shared_ptr<Node> head;
	std::uint64_t h = 0;

	for (int i = 0; i < 20000; i++) {
		auto n = std::make_shared<Node>();
		n->name = "node" + std::to_string(i);
		n->values.assign(static_cast<std::size_t>(i % 17), i);
		n->next = head;
		head = n;
		if (i % 1000 == 500)
			head.reset();	/* frees a chain of a thousand */
	}
	for (auto p = head; p; p = p->next)
		h = mix(h, hash_string(p->name) + p->values.size());
	/* unlink iteratively: a long recursive destruction could overflow the stack */
	while (head)
		head = head->next;
	return h;
}

std::uint64_t exceptions()
{
	std::uint64_t h = 0;

	for (int i = 0; i < 2000; i++) {
		try {
			throw std::runtime_error("failure number " + std::to_string(i));
		} catch (const std::exception &e) {
			h = mix(h, hash_string(e.what()));
		}
	}
	return h;
}

} // namespace

int main()
{
	std::printf("strings_and_maps %016llx\n", static_cast<unsigned long long>(strings_and_maps()));
	std::printf("vectors_and_lists %016llx\n", static_cast<unsigned long long>(vectors_and_lists()));
	std::printf("arrays_and_alignment %016llx\n",
		    static_cast<unsigned long long>(arrays_and_alignment()));
	std::printf("shared_chain %016llx\n", static_cast<unsigned long long>(shared_chain()));
	std::printf("exceptions %016llx\n", static_cast<unsigned long long>(exceptions()));
	return 0;
}
