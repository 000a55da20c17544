// SPDX-License-Identifier: MIT
// shm's tables of large messages in flight (transfer_table.hpp), in one process: a rank asks
// whether any of its tables holds an offer from a count the tables keep, so every way a table
// fills or empties must keep that count, and only those.

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "commx/transport/detail/shm/transfer_table.hpp"

namespace shm = commx::detail::shm;

namespace {

std::shared_ptr<shm::operation> offer(std::uint64_t generation) {
  auto op = std::make_shared<shm::operation>(shm::operation::kind::send, 1, 7, 3);
  op->generation = generation;
  return op;
}

}  // namespace

TEST_CASE("the busy count follows each table from empty to holding and back", "[shm]") {
  std::size_t busy = 0;
  std::vector<shm::transfer_table> tables;
  for (int t = 0; t < 3; ++t) tables.emplace_back(&busy);  // moved as the vector grows

  tables[0].put(0, offer(1));
  tables[0].put(shm::no_ticket, offer(2));  // a second offer: the same table, counted once
  CHECK(busy == 1);
  tables[2].put(shm::no_ticket, offer(5));
  CHECK(busy == 2);

  // Erasing what is not there (withdrawn meanwhile, a stale generation) changes nothing.
  tables[1].erase(0, 1);
  tables[2].erase(shm::no_ticket, 6);
  CHECK(busy == 2);

  tables[0].erase(0, 1);
  CHECK(busy == 2);  // its slotless offer is still in flight
  tables[0].erase(shm::no_ticket, 2);
  CHECK(busy == 1);
  CHECK(tables[0].empty());

  // A peer lost: every offer to it released at once.
  const auto held = offer(9);
  tables[1].put(4, held);
  tables[1].put(shm::no_ticket, offer(10));
  CHECK(busy == 2);
  int released = 0;
  tables[1].release_all([&](shm::operation&) { ++released; });
  CHECK(released == 2);
  CHECK(busy == 1);

  // An abandoned operation forgotten: its table empties only when it held nothing else.
  tables[1].put(4, held);
  CHECK(busy == 2);
  tables[1].forget(*held);
  CHECK(busy == 1);
  tables[2].forget(*held);  // not this table's
  CHECK(busy == 1);
  tables[2].erase(shm::no_ticket, 5);
  CHECK(busy == 0);
}

TEST_CASE("a table made without a count keeps none", "[shm]") {
  std::size_t busy = 0;
  shm::transfer_table counted(&busy);
  shm::transfer_table uncounted;
  uncounted.put(0, offer(1));
  CHECK_FALSE(uncounted.empty());
  CHECK(busy == 0);
  counted.put(0, offer(1));
  CHECK(busy == 1);
}
